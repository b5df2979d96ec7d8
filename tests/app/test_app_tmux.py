"""End to end in a real terminal: tmux runs `mgpu-tui`, keys drive it, the screen is read."""

import re
import subprocess
import time

import pytest
from waiting import wait_until

from conftest import CLI, screen, wait_screen


def start(args: str, tmp_path) -> tuple[str, object]:
    """Run `mgpu-tui ARGS` in a new 160x50 tmux session; its exit code lands in the returned file.

    COLUMNS and LINES, where a CI sets them, would win over the terminal's own size (as for
    any program that asks Python for it), so the app runs without them.
    """
    session = f"mgpu-test-{time.monotonic_ns()}"
    marker = tmp_path / "exit"
    command = (
        f"cd {tmp_path} && env -u COLUMNS -u LINES XDG_STATE_HOME={tmp_path}/state {CLI[0]} {args} ; "
        f"echo $? > {marker}"
    )
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "160", "-y", "50", command], check=True)
    return session, marker


def wait_exit(marker, timeout: float) -> str:
    """The exit status the shell wrote to `marker`, once whole: `echo $? > marker` creates the file
    before it writes, so an empty file is read again rather than taken for the answer."""

    def whole() -> str | None:
        text = marker.read_text() if marker.exists() else ""
        return text if text.endswith("\n") else None

    text = wait_until(whole, timeout, every=0.1)
    return text.strip() if text else "(no exit within the wait)"


def test_app_in_a_real_terminal_shows_the_host_and_quits_on_q(tmp_path):
    session, marker = start("", tmp_path)
    try:
        # The host's CPU as a figure (the first sample has none: it says it is measuring).
        assert wait_screen(session, r"Host +CPU \d+ cores \[[█░]+\] +\d+%"), screen(session)
        assert "Dashboard" in screen(session)
        subprocess.run(["tmux", "send-keys", "-t", session, "t"], check=True)
        assert wait_screen(session, "no NVIDIA GPU here") or wait_screen(session, "GPU0")
        subprocess.run(["tmux", "send-keys", "-t", session, "q"], check=True)
        assert wait_exit(marker, 10) == "0"
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)


def test_q_pressed_while_the_app_starts_quits_cleanly(tmp_path):
    """A q typed ahead, before the first frame, is a quit like any other: exit 0, no traceback."""
    session, marker = start("", tmp_path)
    try:
        time.sleep(0.3)  # the shell has started the app; its screen is not up yet
        subprocess.run(["tmux", "send-keys", "-t", session, "q"], check=True)
        assert wait_exit(marker, 10) == "0", screen(session)
        assert "Error" not in screen(session)
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)


@pytest.mark.timeout(180)
def test_run_tui_shows_both_ranks_then_q_y_quits_with_no_rank_left_and_exits_130(tmp_path):
    """The issue's own check: rows and samples/s, then q, y, and nothing left.

    How soon the rows show (the issue asks 20 s; 7-8 s here) is measured by `bench/run.py
    app` on a quiet machine. In the suite the other worker's ranks run beside these, at
    normal priority while --tui puts these at nice 10: beside two other 2-rank runs they
    took 25-52 s to start.
    """
    from conftest import live_processes_of, only_run_dir

    runs = tmp_path / "runs"
    command = f"run ddp --nproc 2 --steps 100000 --device cpu --tui --run-dir {runs}"
    session, marker = terminal(command, tmp_path, 160, 50)  # it stays: what was printed is read
    try:
        # A row: rank, state, step, samples/s (a figure, not n/a), loss, peak memory.
        # Both rows, each when its rank has reported (on a busy machine one rank can start a step later).
        for rank in (1, 0):
            assert wait_screen(session, rf"rank {rank} +running +[\d,]+ +[\d,.]+ +\d", timeout=120), screen(
                session
            )
        text = screen(session)
        # The whole terminal is used: the rank table's header is one line of 160 columns.
        assert re.search(r"rank +state +step +samples/s +loss +peak memory", text), text
        subprocess.run(["tmux", "send-keys", "-t", session, "q"], check=True)
        assert wait_screen(session, "Quit and stop every rank"), screen(session)
        subprocess.run(["tmux", "send-keys", "-t", session, "y"], check=True)
        assert wait_exit(marker, 20) == "130"  # `run --tui` ends as its run did: stopped
        # Issue 56: then the summary the headless command prints (on 8177ed0, nothing).
        printed = screen(session)
        assert re.search(r"mode ddp  status interrupted  world size 2  device cpu \(gloo\)", printed), printed
        assert re.search(r"run directory .*/runs/\S+-ddp", printed), printed
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
    assert live_processes_of(only_run_dir(runs)) == []
    # What the app did is in its log, and the run's own log is in the run directory.
    app_log = (tmp_path / "state" / "mgpu-tui" / "app.log").read_text()
    assert "started ddp, 2 rank(s) on cpu (gloo)" in app_log
    assert "stopping every process of the run" in app_log
    assert "interrupted" in (only_run_dir(runs) / "mgpu-tui.log").read_text()


def test_run_tui_of_a_run_that_failed_exits_1_and_the_terminal_keeps_its_title(tmp_path):
    """`run --tui` ends as its run did (1 here, as headless); the rank's escapes, which would
    retitle the terminal and clear it, are drawn as text."""
    (tmp_path / "job.py").write_text(
        'import os\nif os.environ["RANK"] == "1":\n    raise RuntimeError("\\x1b]2;pwned\\x07\\x1b[2Jboom")\n'
    )
    session, marker = start(f"run --script job.py --nproc 2 --tui --run-dir {tmp_path}/runs", tmp_path)
    try:
        assert wait_screen(session, r"Root cause: rank 1 failed first", timeout=90), screen(session)
        assert "RuntimeError: ^[]2;pwned^G^[[2Jboom" in screen(session)
        title = subprocess.run(
            ["tmux", "display-message", "-p", "-t", session, "#{pane_title}"], capture_output=True, text=True
        ).stdout
        assert "pwned" not in title
        subprocess.run(["tmux", "send-keys", "-t", session, "q"], check=True)
        assert wait_exit(marker, 10) == "1"
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)


def keys(session: str, *pressed: str) -> None:
    subprocess.run(["tmux", "send-keys", "-t", session, *pressed], check=True)


def test_open_replays_a_finished_run_and_follows_a_live_one_that_outlives_the_app(tmp_path):
    """The issue's own check: `open` on a finished run shows it whole; a run started in another
    terminal is followed (its step grows), quitting leaves it going, and s, y stops it."""
    from conftest import live_processes_of, only_run_dir, run_cli

    # A run started elsewhere: its own terminal, its own monitor (started first: it warms up
    # while the finished run is made and replayed).
    live_runs = tmp_path / "live-runs"
    other = f"other-{time.monotonic_ns()}"
    command = f"{CLI[0]} run ddp --nproc 2 --steps 100000 --device cpu --run-dir {live_runs}"
    subprocess.run(
        [
            "tmux",
            "new-session",
            "-d",
            "-s",
            other,
            "-x",
            "120",
            "-y",
            "20",
            f"cd {tmp_path} && {command}; echo $? > {tmp_path}/other-exit",
        ],
        check=True,
    )
    try:
        runs = tmp_path / "runs"
        done = run_cli(
            "run",
            "ddp",
            "--nproc",
            "2",
            "--steps",
            "60",
            "--device",
            "cpu",
            "--run-dir",
            str(runs),
            "--sample-interval",
            "0.2",
        )
        assert done.returncode == 0, done.stderr
        session, marker = start(f"open latest --run-dir {runs}", tmp_path)
        try:
            assert wait_screen(session, r"ddp finished ok: 60 steps"), screen(session)
            text = screen(session)
            for row in (r"rank 0 +done +60 ", r"rank 1 +done +60 "):
                assert re.search(row, text), text
            for chart in (
                r"throughput \(samples/s\), whole run",
                r"loss \(global batch\), whole run",
                r"(?m)step 1 +─ smoothed +60\s*$",
                r"host CPU, whole run · now \d+%",
                r"host memory, whole run",
            ):
                assert re.search(chart, text), text
            assert wait_screen(session, r"rank 1 .*step 60 +loss"), screen(session)  # the logs, from files
            keys(session, "q")
            assert wait_exit(marker, 10) == "0"
        finally:
            subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)

        assert wait_screen(other, r"step [\d,]+/100000", timeout=90), screen(other)
        live = only_run_dir(live_runs)
        marker.unlink()
        session, marker = start(f"open {live}", tmp_path)
        try:
            assert wait_screen(session, r"followed: q leaves it running"), screen(session)
            first = int(re.search(r"step ([\d,]+)/100,000", screen(session)).group(1).replace(",", ""))
            assert wait_screen(session, rf"step (?!{first:,}/)[\d,]+/100,000"), screen(session)  # it grows
            keys(session, "q")
            assert wait_exit(marker, 10) == "0"
        finally:
            subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
        time.sleep(1)
        assert not (tmp_path / "other-exit").exists() and live_processes_of(live)  # still going

        marker.unlink()
        session, marker = start(f"open {live}", tmp_path)
        try:
            assert wait_screen(session, r"followed: q leaves it running"), screen(session)
            keys(session, "s")
            asked = r"This run was started elsewhere \(its monitor is pid \d+"
            assert wait_screen(session, asked), screen(session)
            keys(session, "y")
            assert wait_screen(session, r"ddp interrupted: [\d,]+ steps", timeout=30), screen(session)
            keys(session, "q")
            assert wait_exit(marker, 10) == "0"
        finally:
            subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
        assert wait_exit(tmp_path / "other-exit", 20) == "130"  # stopped as by Ctrl-C in its terminal
        assert live_processes_of(live) == []
    finally:
        subprocess.run(["tmux", "kill-session", "-t", other], capture_output=True)


def test_make_run_at_80x24_guides_a_first_user_and_enter_starts_a_run(tmp_path):
    """The README's own command in the smallest common terminal: on this CPU machine the first
    screen says what to do and shows the host; r, Tab, Enter starts a run whose ranks and charts show."""
    from conftest import TESTS, live_processes_of, only_run_dir

    runs = tmp_path / "runs"
    session = f"mgpu-make-{time.monotonic_ns()}"
    marker = tmp_path / "exit"
    command = (
        f"cd {TESTS.parent} && env -u COLUMNS -u LINES XDG_STATE_HOME={tmp_path}/state "
        f"make --no-print-directory run ARGS='--run-dir {runs}'; echo $? > {marker}"
    )
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "80", "-y", "24", command], check=True)
    try:
        assert wait_screen(session, r"What you can do here", timeout=60), screen(session)
        text = screen(session)
        for key in ("r ", "c ", "t ", "h "):
            assert re.search(rf"^ +{re.escape(key)} +\S", text, re.MULTILINE), (key, text)
        host = r"This host: \d+ sockets?, \d+ cores?, \d+ logical CPUs?, \d+ NUMA nodes?"
        assert re.search(host, text), text
        assert re.search(r"NUMA node 0: CPUs [\d,-]+ \(\d+\), memory [\d.]+ [KMGT]iB", text), text
        keys(session, "r")
        assert wait_screen(session, r"What it does:"), screen(session)
        keys(session, "Enter")  # the mode's list opens; up twice from ddp is single (one process: quick)
        assert wait_screen(session, r"esc Dismiss menu"), screen(session)  # open: keys now move in it
        keys(session, "Up", "Up", "Enter")
        assert wait_screen(session, r"single: on the CPU +▼"), screen(session)  # chosen, and closed
        keys(session, "Tab", "Tab", "Enter")  # past the model to the ranks field; Enter starts
        assert wait_screen(session, r"rank 0 +running +\d+", timeout=120), screen(session)
        assert wait_screen(session, r"throughput"), screen(session)
        # A chart's axis, with its legend: at 80x24 the charts sit under the ranks, half the width each.
        assert wait_screen(session, r"(?m)step 1 +(─ smoothed +)?[\d,]+\s*$"), screen(session)
        keys(session, "q")
        if wait_screen(session, "Quit and stop every rank", timeout=3):  # unless it finished already
            keys(session, "y")
        assert wait_exit(marker, 30) == "0"
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
    assert live_processes_of(only_run_dir(runs)) == []


@pytest.mark.timeout(180)
def test_s_then_q_three_seconds_later_then_y_exits_within_five_seconds(tmp_path):
    """Issue #43's timing, in a real terminal: the run stops under the question; yes then quits
    (it sat on "Stopping every rank, then quitting…" for over 75 s)."""
    from conftest import live_processes_of, only_run_dir

    runs = tmp_path / "runs"
    session, marker = start(f"run ddp --nproc 2 --steps 2000 --device cpu --tui --run-dir {runs}", tmp_path)
    try:
        assert wait_screen(session, r"rank 0 +running +[\d,]+", timeout=120), screen(session)
        keys(session, "s")
        time.sleep(3)
        keys(session, "q")
        if wait_screen(session, "Quit and stop every rank", timeout=3):  # unless its end came first
            keys(session, "y")
        # Within 5 s on an idle machine, 10 times of 10 (the measure); the suite allows for
        # the other worker's load, and still fails the hang it was (over 75 s).
        assert wait_exit(marker, 20) == "130", screen(session)
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
    assert live_processes_of(only_run_dir(runs)) == []


def test_the_cli_tables_fit_an_80_column_terminal(tmp_path):
    """Issue #43: `list` was about 150 columns, `plan` 210, `compare` 110: at 80 every row wrapped.
    In a terminal of 80 columns each row fits (tmux joins what the terminal wrapped: -J)."""
    session = f"mgpu-tables-{time.monotonic_ns()}"
    marker = tmp_path / "exit"
    command = (
        f"cd {tmp_path} && env -u COLUMNS -u LINES {CLI[0]} list && {CLI[0]} plan --gpus 8 --gpu-mem 80 "
        f"&& {CLI[0]} runs --run-dir {tmp_path}; echo $? > {marker}; sleep 30"
    )
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "80", "-y", "300", command], check=True)
    try:
        assert wait_exit(marker, 60) == "0", screen(session)
        joined = subprocess.run(
            ["tmux", "capture-pane", "-p", "-J", "-t", session, "-S", "-", "-E", "-"],
            capture_output=True,
            text=True,
        ).stdout
        tables = [line for line in joined.splitlines() if "  " in line.strip()]  # a table's rows
        assert "hybrid" in joined and "fits" in joined, joined
        assert max(len(line.rstrip()) for line in tables) <= 80, joined
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)


def test_open_serves_the_runs_metrics_while_the_app_shows_it_and_stops_on_q(tmp_path):
    """`open RUN --metrics-port P`: the app's run (here a finished one whose ranks wrote hostile
    text everywhere) served for as long as the app is open, in the ranks' states the view shows."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    from conftest import hostile_finished_run
    from prometheus_server import free_port

    folder = hostile_finished_run(tmp_path / "runs")
    port = free_port()

    def states() -> dict[str, str] | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
                text = answer.read().decode()
        except OSError:
            return None
        found = {
            s.labels.get("rank", "run"): s.labels.get("mgpu_rank_state") or s.labels["mgpu_run_state"]
            for f in text_string_to_metric_families(text)
            for s in f.samples
            if s.name in ("mgpu_rank_state", "mgpu_run_state") and s.value == 1
        }
        return found if found.get("run") == "failed" else None

    session, marker = start(f"open {folder} --metrics-port {port}", tmp_path)
    try:
        assert wait_screen(session, r"rank 1 +failed"), screen(session)
        assert wait_until(states, 20, every=0.2) == {"run": "failed", "0": "failed", "1": "failed"}
        keys(session, "q")
        assert wait_exit(marker, 10) == "0"
        assert states() is None  # nothing served once the app is gone
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)


SPAWN_HANG = """
import time
import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def work(rank, world):
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(1, 10_000):
        model(torch.randn(4, 8)).pow(2).mean().backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
        optimizer.step()
        optimizer.zero_grad()
        if step == 8 and rank == 1:
            time.sleep(3600)  # line 20: rank 1 stops here, in plain Python


if __name__ == "__main__":
    mp.spawn(work, args=(2,), nprocs=2)
"""


def terminal(command: str, tmp_path, width: int, height: int) -> tuple[str, object]:
    """``command`` (mgpu-tui's arguments) in a new tmux session of this size, which stays after it
    exits (what it printed last is read there); its exit status lands in the returned file."""
    session = f"mgpu-test-{time.monotonic_ns()}"
    marker = tmp_path / f"exit-{session}"
    line = (
        f"cd {tmp_path} && env -u COLUMNS -u LINES XDG_STATE_HOME={tmp_path}/state {CLI[0]} {command} ; "
        f"echo $? > {marker}; sleep 120"
    )
    size = ["-x", str(width), "-y", str(height)]
    subprocess.run(["tmux", "new-session", "-d", "-s", session, *size, line], check=True)
    return session, marker


@pytest.mark.timeout(600)
def test_a_commands_hang_at_160x45_after_s_in_the_cli_summary_and_replayed_by_its_name_at_80x24(tmp_path):
    """Issue 56, for `exec` of an mp.spawn job (its ranks are the command's own): the hang's verdict
    live, kept after s with the rank that hung `stalled` (on 8177ed0 it said `done`: mp.spawn's
    children get SIGINT as their parent goes, and rank 1 said done as it left), the panel given the
    rows the logs do not need at 160x45 (3 lines of it over a 25-row log box holding 4 on 8177ed0),
    the CLI's summary printed once the app is gone (nothing on 8177ed0), then `open` by the folder
    name `runs` prints (refused on 8177ed0), at 80x24, the hang first in its panel."""
    import socket
    import sys

    from conftest import live_processes_of, only_run_dir, read_summary

    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    (tmp_path / "spawn_hang.py").write_text(SPAWN_HANG.format(port=port))
    verdict = r"stalled for 15 s: rank 1 never entered all_reduce\(float32\[1, 8\]\) #\d+ \(default group\)"
    runs = tmp_path / "runs"
    command = f"exec --stall-timeout 15 --tui --run-dir {runs} -- {sys.executable} spawn_hang.py"
    session, marker = terminal(command, tmp_path, 160, 45)
    try:
        assert wait_screen(session, rf"Hang: {verdict}", timeout=420), screen(session)
        keys(session, "s")
        assert wait_screen(session, r"exec interrupted after a hang: \d+ steps", timeout=60), screen(session)
        # (each looked for until drawn: a screen read mid-frame has the status line before the panel)
        assert wait_screen(session, rf"Hung: {verdict}"), screen(session)
        for rank in (0, 1):  # the hung ranks are never done
            assert wait_screen(session, rf"rank {rank} +stalled +8 "), screen(session)
        # The panel's last line: it was given the rows it needs.
        assert wait_screen(session, r"Run directory: "), screen(session)
        keys(session, "q")
        assert wait_exit(marker, 30) == "130"  # stopped, as the headless command says it
        printed = screen(session)
        assert re.search(r"mode exec  status interrupted  world size 2", printed), printed
        assert re.search(rf"hung: {verdict}", printed.replace("\n", "")), printed
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
    run_dir = only_run_dir(runs)
    assert live_processes_of(run_dir) == []
    summary = read_summary(run_dir / "summary.json")  # the rank's own word: it did not finish
    assert [r.done for r in summary.ranks] == [False, False] and not summary.finished_training

    session, marker = terminal(f"open {run_dir.name} --run-dir {runs}", tmp_path, 80, 24)
    try:
        assert wait_screen(session, r"exec interrupted", timeout=30), screen(session)
        assert wait_screen(session, r"Hung: stalled for 15 s: rank 1 never entered"), screen(session)  # first
        assert wait_screen(session, r"rank 1 +stalled +8 "), screen(session)
        keys(session, "q")
        assert wait_exit(marker, 10) == "0"
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
