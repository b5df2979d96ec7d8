"""`mgpu-tui exec -- CMD` is a prefix (issue #55): the job sees what it sees bare. Each test runs
tests/scripts/as_bare.py bare and under `exec`, each in a real terminal of its own (tests/terminal.py:
Python's pty, the command in the terminal's foreground process group, as a shell's prompt runs it),
drives both alike (a Ctrl-C typed, a signal sent), and compares what the job saw (its own file), its
exit status and what the terminal got; under `exec`, the watch was active (steps counted) and no
process of the run is left. An mp.spawn job's, and the torchrun drop-in's where torchrun itself
behaves so, are in tests/frameworks/test_launchers_as_bare.py (make test-frameworks: each starts
three or more torch processes twice)."""

import os
import re
import signal
import sys
from pathlib import Path

import pytest
from terminal import Ran, Terminal, bare_and_watched
from waiting import wait_until

from conftest import CLI, REPO, live_processes_of, only_run_dir, read_summary

JOB = str(REPO / "tests" / "scripts" / "as_bare.py")


def both(tmp_path: Path, *job: str, ours=(), drive=None, shell="exec {}") -> tuple[Ran, Ran]:
    """The job bare, then under `mgpu-tui exec OURS` (tests/terminal.py: bare_and_watched)."""
    watched = [*CLI, "exec", "--run-dir", "runs", *ours, "--", sys.executable]  # as ./runs, the default
    return bare_and_watched(
        tmp_path, [JOB, *job], bare=[sys.executable], watched=watched, drive=drive, shell=shell
    )


def ctrl_c(term: Terminal, ready: tuple[bytes, ...] = (b"READY 0",)) -> None:
    """Ctrl-C typed once the job trains (every rank named in ``ready``)."""
    assert all(term.saw(line) for line in ready), term.text()
    term.type(b"\x03")


def steps_counted(run_dir: Path) -> int:
    return read_summary(run_dir / "summary.json").steps


def test_ctrl_c_runs_a_one_process_jobs_keyboard_interrupt_handler_as_bare(tmp_path):
    """On the base commit the job ran in a session of its own: SIGTERM instead, no checkpoint, 130."""
    bare, under = both(tmp_path, "interrupt", drive=ctrl_c)
    assert bare.seen["main"]["checkpoint"] == "saved on KeyboardInterrupt"
    assert under.seen == bare.seen and under.status == bare.status == 0, under.text
    assert steps_counted(under.run_dir) >= 3
    assert read_summary(under.run_dir / "summary.json").status == "interrupted"


def test_sigterm_is_passed_on_and_an_8_s_handler_completes_within_a_10_s_grace(tmp_path):
    """On the base commit: killed at a fixed 5 s, no checkpoint."""

    def terminate(term: Terminal) -> None:
        assert term.saw(b"READY 0"), term.text()
        os.kill(term.pid, signal.SIGTERM)  # to the command alone: mgpu-tui, or the bare job

    bare, under = both(tmp_path, "term", "--takes", "8", ours=("--stop-grace", "10"), drive=terminate)
    assert bare.seen["main"]["checkpoint"] == "whole"
    assert under.seen == bare.seen and under.status == bare.status == 0, under.text


def test_nohup_and_a_hangup_the_job_finishes_as_bare(tmp_path):
    """On the base commit mgpu-tui's own SIGHUP handler replaced nohup's SIG_IGN: the job died."""
    log = tmp_path / "nohup.out"

    def hang_up(term: Terminal) -> None:
        assert wait_until(lambda: log.exists() and b"READY" in log.read_bytes(), 90, every=0.1)
        log.unlink()  # the next run's READY is its own
        term.group_signal(signal.SIGHUP)  # the terminal went: its foreground group hears it

    bare, under = both(tmp_path, "finish", "--steps", "150", shell="exec nohup {}", drive=hang_up)
    assert bare.seen["main"]["steps"] == 150
    assert under.seen == bare.seen and under.status == bare.status == 0
    assert steps_counted(under.run_dir) == 150


def test_a_job_that_reopens_dev_stderr_keeps_every_line_and_writes_no_nul(tmp_path):
    """On the base commit the job's stderr was the log file, which the reopen truncated."""
    bare, under = both(tmp_path, "reopen")
    assert under.status == bare.status == 0
    # stdout and stderr are a terminal each: between the two, the order may differ by a line
    assert sorted(under.job_text().splitlines()) == sorted(bare.text.splitlines())
    logs = under.run_dir / "logs" / "command"
    errors = (logs / "stderr.log").read_bytes()
    assert b"\0" not in errors
    lines = [f"line {i}" for i in range(80)]
    assert errors.decode().splitlines() == lines[:40] + ["warning"] + lines[40:]
    assert (logs / "stdout.log").read_text() == "reopened stdout\n"


def test_a_job_that_changes_directory_before_its_first_step_is_followed(tmp_path):
    """On the base commit the run folder was handed over as runs/...: the job's events went under
    its own folder, and mgpu-tui counted 0 steps of world size 0."""
    bare, under = both(tmp_path, "chdir", "--steps", "20")
    assert under.seen == bare.seen and under.status == bare.status == 0
    summary = read_summary(under.run_dir / "summary.json")
    assert summary.world_size == 1 and summary.steps == 20
    assert not (tmp_path / "elsewhere" / "runs").exists()


@pytest.mark.parametrize("shell", ["exec {} < input.bin", "cat input.bin | {}"])
def test_stdin_arrives_and_a_redirected_file_stays_seekable(tmp_path, shell):
    """On the base commit the job's stdin was /dev/null."""
    (tmp_path / "input.bin").write_bytes(bytes(range(256)) * 64)
    bare, under = both(tmp_path, "stdin", shell=shell)
    assert under.seen == bare.seen and under.status == bare.status == 0
    seen = bare.seen["main"]
    assert seen["seek"] == (seen["stdin"] if "<" in shell else "UnsupportedOperation")


def test_the_job_has_a_terminal_of_the_same_size_and_tqdm_draws_the_same_bytes(tmp_path):
    """On the base commit the job's stdout and stderr were files: no terminal, and tqdm drew one
    line per update with no carriage return; it was in a session of its own, and had mgpu-tui's
    raised limit of open files. Its signals' dispositions are a shell's job's."""
    bare, under = both(tmp_path, "tty", shell="ulimit -Sn 1000; exec {}")  # mgpu-tui raises its own
    seen = bare.seen["main"]
    assert seen["isatty"] == [True] * 3 and seen["size"] == [100, 40] and seen["foreground"]
    assert seen["open_files"] == 1000
    assert under.seen == bare.seen and under.status == bare.status == 0
    digits = re.compile(r"\d+")
    assert "30/30" in bare.text and "\r" in bare.text
    assert digits.sub("0", under.job_text()) == digits.sub("0", bare.text)
    # The log keeps the bytes as written; the terminal's own \r\n is not in it.
    written = (under.run_dir / "logs" / "command" / "stderr.log").read_bytes()
    assert written.count(b"\r") >= 30 and b"\r\n" not in written


def test_a_70_kb_line_is_in_the_log_and_on_the_terminal_whole(tmp_path):
    """On the base commit a line over 64 KiB vanished from the console with no note."""
    bare, under = both(tmp_path, "long", "--size", "70000")
    line = "x" * 70000
    assert f"{line}\r\nafter\r\n" in bare.text
    assert under.job_text() == bare.text and under.status == bare.status == 0
    assert (under.run_dir / "logs" / "command" / "stdout.log").read_text() == f"{line}\nafter\n"


def test_the_exit_status_is_the_jobs_own(tmp_path):
    """On the base commit every failure was exit 1."""
    statuses = {}
    for code in (0, 1, 3, 5, -signal.SIGKILL):
        folder = tmp_path / f"code{code}"
        folder.mkdir()
        bare, under = both(folder, "exit", "--code", str(code))
        statuses[code] = (bare.status, under.status)
    assert statuses == {0: (0, 0), 1: (1, 1), 3: (3, 3), 5: (5, 5), -9: (137, 137)}


def test_killing_mgpu_tui_leaves_nothing_of_a_job_in_its_foreground(tmp_path):
    """The job shares mgpu-tui's process group now, not a session of the keeper's: mgpu-tui killed
    by SIGKILL (no handler of its runs), the keeper sees its control pipe close, and the job gets
    SIGTERM, then SIGKILL at the end of the stop grace."""
    runs = tmp_path / "runs"
    argv = [*CLI, "exec", "--run-dir", str(runs), "--stop-grace", "2", "--", sys.executable, JOB, "finish"]
    term = Terminal([*argv, "--out", str(tmp_path / "seen.json")], cwd=tmp_path)
    assert term.saw(b"READY 0"), term.text()
    run_dir = only_run_dir(runs)
    assert live_processes_of(run_dir)
    os.kill(term.pid, signal.SIGKILL)
    assert term.wait() == 137
    assert wait_until(lambda: not live_processes_of(run_dir), 30, every=0.2), live_processes_of(run_dir)
