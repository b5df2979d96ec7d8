"""Issue #55 for jobs of several ranks: an mp.spawn job under `exec`, and the torchrun drop-in where
torchrun itself behaves so, each against the same job bare in a real terminal (tests/terminal.py),
as tests/integration/test_as_bare.py does for a one-process job. Here (make test-frameworks): each
starts three torch processes or more, twice."""

import os
import signal
import sys
from pathlib import Path

from terminal import Ran, Terminal, bare_and_watched

from conftest import CLI, REPO, read_summary

JOB = str(REPO / "tests" / "scripts" / "as_bare.py")
BOTH_READY = (b"READY 0", b"READY 1")


def ctrl_c(term: Terminal) -> None:
    assert all(term.saw(line) for line in BOTH_READY), term.text()
    term.type(b"\x03")


def drop_in(tmp_path: Path, *job: str, torchrun=(), drive=None) -> tuple[Ran, Ran]:
    """The job under torchrun with two ranks, then under `mgpu-tui torchrun` with the same line."""
    line = ["--nproc-per-node", "2", *torchrun]
    return bare_and_watched(
        tmp_path,
        [JOB, *job],
        bare=[sys.executable, "-m", "torch.distributed.run", *line],
        watched=[*CLI, "torchrun", "--run-dir", "runs", *line],  # as ./runs, the default
        drive=drive,
    )


def test_ctrl_c_reaches_every_rank_mp_spawn_started_as_bare(tmp_path):
    """On the base commit the ranks got SIGTERM from mgpu-tui: no checkpoint, exit 130."""
    bare, under = bare_and_watched(
        tmp_path,
        [JOB, "spawn"],
        bare=[sys.executable],
        watched=[*CLI, "exec", "--run-dir", "runs", "--", sys.executable],
        drive=ctrl_c,
    )
    ranks = {"rank0": {"checkpoint": 0}, "rank1": {"checkpoint": 1}}  # each from its own KeyboardInterrupt
    assert bare.seen == {"main": {"cwd": str(tmp_path), "parent": "interrupted"}, **ranks}
    assert under.seen == bare.seen and under.status == bare.status == 0, under.text
    summary = read_summary(under.run_dir / "summary.json")
    assert summary.world_size == 2 and summary.steps >= 3


def test_ctrl_c_under_the_drop_in_is_torchruns_own(tmp_path):
    """torchrun passes the Ctrl-C to its ranks, which save; it then ends with its own traceback and
    exit 1, as bare. On the base commit the ranks got SIGTERM from mgpu-tui, and it exited 130."""
    bare, under = drop_in(tmp_path, "interrupt", drive=ctrl_c)
    saved = {"cwd": str(tmp_path), "checkpoint": "saved on KeyboardInterrupt"}
    assert bare.seen == {"rank0": saved, "rank1": saved}
    assert under.seen == bare.seen and under.status == bare.status, under.text
    assert "closing signal SIGINT" in bare.text
    assert read_summary(under.run_dir / "summary.json").steps >= 3


def test_an_8_s_sigterm_handler_completes_within_torchruns_own_shutdown_timeout(tmp_path):
    """--shutdown-timeout 10: torchrun waits 10 s after its SIGTERM to the ranks, as bare. On the
    base commit mgpu-tui set it to 5 s and killed the ranks at its own 5 s: no checkpoint."""

    def terminate(term: Terminal) -> None:
        assert all(term.saw(line) for line in BOTH_READY), term.text()
        os.kill(term.pid, signal.SIGTERM)  # to torchrun, or to mgpu-tui

    bare, under = drop_in(
        tmp_path, "term", "--takes", "8", torchrun=("--shutdown-timeout", "10"), drive=terminate
    )
    whole = {"cwd": str(tmp_path), "checkpoint": "whole"}
    assert bare.seen == {"rank0": whole, "rank1": whole}
    assert under.seen == bare.seen and under.status == bare.status, under.text


def test_a_rank_that_changes_directory_is_followed_and_the_exit_status_is_torchruns(tmp_path):
    """A rank that changes directory before its first step still reaches the run: its flight records,
    dumped every 5 s, go to the run folder (handed over absolute), not under its own folder as on the
    base commit. A rank that exits 3 makes torchrun exit 1, as bare (not mgpu-tui's own 1 by
    coincidence: the same job's exit 0 is 0)."""
    bare, under = drop_in(tmp_path, "chdir", "--steps", "14", "--group", "--pause", "0.5")
    assert under.seen == bare.seen and under.status == bare.status == 0
    summary = read_summary(under.run_dir / "summary.json")
    assert summary.world_size == 2 and [r.last_step for r in summary.ranks] == [14, 14]
    assert (under.run_dir / "fr" / "rank0.json").is_file()
    assert not (tmp_path / "elsewhere" / "runs").exists()
    failing = tmp_path / "failing"
    failing.mkdir()
    bare, under = drop_in(failing, "exit", "--code", "3")
    assert under.status == bare.status == 1
