"""The rank's memory read each step (engine/rank/watch/step_figures.py ``Memory``): /proc/self/statm
through a descriptor kept open (opening it each step cost ten times the read), never a descriptor
that is no longer its own: one the script closed is opened again, one the script reused for a file
of its own is neither read nor closed; read at most every READ_EVERY_S (three system calls, tens of
microseconds in a busy process), and at once where the figure must be the latest (the end's peak)."""

import mmap
import os
import resource

from mgpu_tui.engine.rank.watch import step_figures
from mgpu_tui.engine.rank.watch.step_figures import Memory


def _statm_rss() -> int:
    with open("/proc/self/statm", "rb") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _resident(size: int) -> mmap.mmap:
    """``size`` bytes made resident, in pages of their own: a block from the heap may reuse pages
    the process already holds (a test before, in the same worker, freed them), and add nothing."""
    block = mmap.mmap(-1, size)
    for at in range(0, size, mmap.PAGESIZE):
        block[at] = 1
    return block


def test_the_rss_and_its_peak_are_the_kernels_and_follow_the_process():
    memory = Memory()
    now, peak = memory.read(None, None)
    assert abs(now - _statm_rss()) <= 1 << 20
    assert peak == resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    block = _resident(64 << 20)
    grown, _ = memory.read(None, None, fresh=True)  # the same descriptor, read again: the process now
    assert grown - now >= 60 << 20, (now, grown)
    block.close()
    memory.close()


def test_a_step_soon_after_the_last_reading_is_given_it_and_the_next_reads_again(monkeypatch):
    monkeypatch.setattr(step_figures, "READ_EVERY_S", 3600.0)
    memory = Memory()
    before = memory.read(None, None)
    block = _resident(64 << 20)
    assert memory.read(None, None) == before  # within READ_EVERY_S: the last reading, no system call
    now, peak = memory.read(None, None, fresh=True)  # the end's: read however recent the last
    assert now - before[0] >= 60 << 20 and peak >= now - (1 << 20)  # (the high-water mark lags a little)
    monkeypatch.setattr(step_figures, "READ_EVERY_S", 0.0)
    block.close()  # its pages given back
    assert memory.read(None, None)[0] < now - (60 << 20)  # due: read again
    memory.close()


def test_a_descriptor_the_script_closed_or_reused_is_let_go_and_its_file_untouched(tmp_path):
    memory = Memory()
    memory.read(None, None)
    fd = memory._fd
    os.close(fd)  # a script's os.closerange(3, ...)
    assert abs(memory.read(None, None, fresh=True)[0] - _statm_rss()) <= 1 << 20
    fd = memory._fd
    os.close(fd)
    theirs = tmp_path / "theirs.txt"
    theirs.write_text("1 2 3 4 5 6 7\n")  # numbers where statm's are: read, they would be believed
    reused = os.open(theirs, os.O_RDWR)
    assert reused == fd  # the script's file under the watch's old number
    now, _ = memory.read(None, None, fresh=True)
    assert abs(now - _statm_rss()) <= 1 << 20  # not 2 pages: the script's file was not read
    assert memory._fd != reused
    os.write(reused, b"x")  # still open: the watch never closed the script's descriptor
    os.close(reused)
    assert theirs.read_text().startswith("x")
    memory.close()
