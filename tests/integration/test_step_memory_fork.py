"""A forked child (a rank of ``start_processes(start_method="fork")``) reads its own memory, not its
parent's: the descriptor the parent kept open on /proc/self/statm names the parent, so the watch
closes it in the child (ScriptWatch.after_fork_in_child) and the child opens its own. The child grows
by 256 MiB: its own reading grows with it, its parent's does not."""

import mmap
import os

from mgpu_tui.engine.rank.watch.step_figures import Memory


def _growth_in_child(memory: Memory, close: bool) -> int:
    """How much the child's reading grows while the child takes 256 MiB more, resident."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            if close:
                memory.close()
            before = memory.read(None, None, fresh=True)[0]
            block = mmap.mmap(-1, 256 << 20)  # pages of its own (a heap's block may reuse some held)
            for at in range(0, 256 << 20, mmap.PAGESIZE):
                block[at] = 1  # resident
            os.write(write, str(memory.read(None, None, fresh=True)[0] - before).encode())
            block.close()
        finally:
            os._exit(0)
    os.close(write)
    said = os.read(read, 64)
    os.close(read)
    os.waitpid(pid, 0)
    return int(said)


def test_a_forked_child_reads_its_own_rss_once_its_parents_descriptor_is_closed():
    memory = Memory()
    parent, _ = memory.read(None, None, fresh=True)
    assert _growth_in_child(memory, close=False) < 64 << 20  # unclosed: the parent's, which did not grow
    assert _growth_in_child(memory, close=True) >= 200 << 20  # closed: its own
    assert memory.read(None, None, fresh=True)[0] - parent < 64 << 20  # the parent's descriptor: its own
    memory.close()
