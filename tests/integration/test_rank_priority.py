"""The ranks of a run the app starts give way to its screen (engine/launch/priority.py): their nice
value, and their session's scheduling group. torchrun forks each rank, and the rank then makes a
session of its own; a scan of the tree between the two lowered the parent's group, and the rank's
own stayed at nice 0 (seen once in tests/app/test_app.py under load)."""

import os
import sys
import time
from pathlib import Path

import psutil
import pytest

from mgpu_tui.engine.launch.command import Launch
from mgpu_tui.engine.launch.processes import ProcessTree

NICE = 7
# The launcher: a child that starts in the launcher's session, then makes one of its own (setsid).
LAUNCHER = (
    "import subprocess, sys\n"
    "rank = subprocess.Popen([sys.executable, '-c', "
    "'import os, time; time.sleep(3.0); os.setsid(); time.sleep(30)'])\n"
    "rank.wait()\n"
)


def group_nice(pid: int) -> int:
    return int(Path(f"/proc/{pid}/autogroup").read_text().split()[-1])


@pytest.mark.skipif(not Path("/proc/self/autogroup").exists(), reason="a kernel without sched_autogroup")
def test_a_rank_seen_before_its_setsid_gets_its_own_sessions_group_lowered(tmp_path):
    launch = Launch(
        argv=(sys.executable, "-c", LAUNCHER), env=dict(os.environ), env_changes={}, python=sys.executable
    )
    tree = ProcessTree(launch, "priority-test", NICE, launcher_is_rank=False)
    with open(tmp_path / "out", "w") as out:
        tree.start(out, out)
    try:
        deadline = time.monotonic() + 20
        rank = None
        while rank is None and time.monotonic() < deadline:  # the scan sees it before its setsid
            tree.record_descendants()
            children = psutil.Process(tree.launcher).children() if tree.launcher else []
            rank = children[0].pid if children and tree.was_rank(children[0].pid) else None
            time.sleep(0.02)
        assert rank is not None and os.getsid(rank) == os.getsid(tree.started.pid)
        while os.getsid(rank) == os.getsid(tree.started.pid) and time.monotonic() < deadline:
            time.sleep(0.05)  # until it made its own session
        assert os.getsid(rank) == rank and group_nice(rank) == 0  # its new group: not lowered yet
        tree.record_descendants()  # the next scan
        assert group_nice(rank) == NICE
    finally:
        tree.terminate(grace=1.0)
        tree.close()
