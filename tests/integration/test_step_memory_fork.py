"""A forked child (a rank of ``start_processes(start_method="fork")``) reads its own memory, not its
parent's: the descriptor the parent kept open on /proc/self/statm names the parent, so the watch
closes it in the child (ScriptWatch.after_fork_in_child) and the child opens its own."""

import os

from mgpu_tui.engine.rank.watch.step_figures import Memory


def _in_child(memory: Memory, close: bool) -> int:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: 256 MiB more than its parent, resident
        try:
            if close:
                memory.close()
            block = bytearray(256 << 20)
            os.write(write, str(memory.read(None, None)[0]).encode())
            del block
        finally:
            os._exit(0)
    os.close(write)
    said = os.read(read, 64)
    os.close(read)
    os.waitpid(pid, 0)
    return int(said)


def test_a_forked_child_reads_its_own_rss_once_its_parents_descriptor_is_closed():
    memory = Memory()
    parent, _ = memory.read(None, None)
    assert _in_child(memory, close=False) - parent < 128 << 20  # the parent's, as it would be unclosed
    assert _in_child(memory, close=True) - parent >= 200 << 20  # its own
    assert memory.read(None, None)[0] - parent < 128 << 20  # the parent's descriptor is still its own
    memory.close()
