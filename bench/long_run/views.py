"""What a user does with a long run's folder (bench/long_run/__init__.py): its size on disk, its figures
read back in-process (records/follow.py), ``mgpu-tui open`` in a real 160x50 terminal (tmux) until it
shows every rank's last step, and ``runs`` and ``compare --runs``. Prints its figures as one JSON line.

    python bench/long_run/views.py FOLDER STEPS
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # bench/, for its common module

from app_screen import _byte_compile  # noqa: E402
from common import APP, CLI, clean_env, timed  # noqa: E402


def _tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], capture_output=True, text=True).stdout


def _size_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink()) / 1e6


def _replay_s(folder: Path) -> float:
    """Seconds to read the finished run's figures back, as the app's run thread does."""
    from mgpu_tui.engine.records.follow import FollowedRun

    started = time.perf_counter()
    run = FollowedRun(folder)
    while not run.poll().finished:
        pass
    run.stats(), run.series(), run.whole_series()
    run.close()
    return time.perf_counter() - started


def _peak_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _open(folder: Path, steps: int) -> dict:
    """``mgpu-tui open`` from the Enter that starts it: its first frame (the tabs), then every rank
    of the run in its table with its last step; its peak memory 5 s after."""
    import psutil

    session = "mgpu-bench-long-run"
    _tmux("kill-session", "-t", session)
    command = f"read go && exec {APP} open {folder}"
    _tmux("new-session", "-d", "-s", session, "-x", "160", "-y", "50", command)
    started = time.perf_counter()
    _tmux("send-keys", "-t", session, "Enter")
    first = shown = None
    deadline = time.monotonic() + 120
    while shown is None and time.monotonic() < deadline:
        screen = _tmux("capture-pane", "-t", session, "-p")
        if first is None and "Runs" in screen:
            first = time.perf_counter() - started
        rows = [line for line in screen.splitlines() if re.match(r"\s*rank \d+ ", line)]
        if len(rows) >= 8 and all(f" {steps} " in f" {row} " for row in rows[:8]):
            shown = time.perf_counter() - started
        time.sleep(0.02)
    shell = psutil.Process(int(_tmux("list-panes", "-t", session, "-F", "#{pane_pid}").strip()))
    app = next(
        (p for p in [shell, *shell.children(recursive=True)] if "mgpu-tui" in " ".join(p.cmdline()[:2])),
        shell,
    )
    time.sleep(5)
    peak = _peak_mb(app.pid)
    _tmux("send-keys", "-t", session, "q")
    time.sleep(1)
    _tmux("kill-session", "-t", session)
    if shown is None:
        raise RuntimeError(f"open never showed the 8 ranks at step {steps}: {screen[-2000:]}")
    return {"first_frame_s": first or shown, "shown_s": shown, "app_peak_mb": peak}


def main(folder: Path, steps: int) -> dict:
    _byte_compile()  # as pip does: each start would compile it all again otherwise (app_screen.py)
    from mgpu_tui.engine.protocol.rundir import RunDir

    heads = RunDir(folder).event_files().values()  # a rank's: its head, and its folder of segments and digest
    rank_mb = max(p.stat().st_size / 1e6 + _size_mb(p.with_suffix("")) for p in heads)
    figures = {"folder_mb": _size_mb(folder), "rank_mb": rank_mb, "replay_s": _replay_s(folder)}
    env = {**clean_env(), "COLUMNS": "160"}
    runs_s, done = timed([CLI, "runs", "--run-dir", str(folder.parent)], env)
    if done.returncode != 0:
        raise RuntimeError(f"runs: {done.stderr[-300:]}")
    again = folder.with_name(folder.name + "-again")  # (compare names each folder once: a copy of it)
    shutil.copytree(folder, again)
    compare_s, done = timed([CLI, "compare", "--runs", str(folder), str(again)], env)
    shutil.rmtree(again)
    if done.returncode not in (0, 1):
        raise RuntimeError(f"compare --runs: {done.stderr[-300:]}")
    return {**figures, "runs_s": runs_s, "compare_s": compare_s, **_open(folder, steps)}


if __name__ == "__main__":
    os.environ.pop("COLUMNS", None)
    print(json.dumps(main(Path(sys.argv[1]), int(sys.argv[2]))))
