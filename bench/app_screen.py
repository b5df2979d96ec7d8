"""app: the app in a real 160x50 terminal (tmux), as bench/run.py's docstring says: its first frame,
idle CPU, the ranks' rows, and a key's latency under a flood of logs."""

from __future__ import annotations

import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from common import APP, table


def _tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], capture_output=True, text=True).stdout


def _app_process(session: str):
    import psutil

    shell = psutil.Process(int(_tmux("list-panes", "-t", session, "-F", "#{pane_pid}").strip()))
    for _ in range(100):
        for proc in [shell, *shell.children(recursive=True)]:
            if "mgpu-tui" in " ".join(proc.cmdline()[:2]):  # the shell may have exec'd the app
                return proc
        time.sleep(0.05)
    raise RuntimeError("the app did not start")


def _wait_exited(proc, timeout: float) -> None:
    """Until ``proc`` (not our child: tmux's) has exited; a zombie its parent has yet to reap counts."""
    import psutil

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                return
        except psutil.NoSuchProcess:
            return
        time.sleep(0.05)
    raise RuntimeError(f"the app (pid {proc.pid}) was still running {timeout:.0f} s after quitting")


def _start_app(session: str, command: str) -> float:
    start = time.perf_counter()
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "160", "-y", "50", command], check=True)
    return start


def _wait_screen(session: str, text: str | tuple[str, ...], timeout: float = 30) -> float:
    texts = (text,) if isinstance(text, str) else text
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        screen = _tmux("capture-pane", "-t", session, "-p")
        if any(t in screen for t in texts):
            return time.perf_counter()
        time.sleep(0.005)
    raise RuntimeError(f"{text!r} never appeared")


def bench_app(flood_seconds: float) -> str:
    rows = []
    work = Path(tempfile.mkdtemp())
    # A session that outlives the others, so the tmux server never shuts down between them.
    subprocess.run(["tmux", "new-session", "-d", "-s", "mgpu-bench-keeper", "sleep 3600"], check=True)
    try:
        return _bench_app(work, rows, flood_seconds)
    finally:
        _tmux("kill-session", "-t", "mgpu-bench-keeper")


def _byte_compile() -> None:
    import compileall

    root = Path(__file__).resolve().parent.parent
    for package in ("mgpu_tui", "engine", "demos"):
        compileall.compile_dir(root / package, quiet=1)


class PaneOutput:
    """What the app writes to its terminal, as tmux receives it (pipe-pane into a FIFO)."""

    def __init__(self, session: str, work: Path) -> None:
        fifo = work / f"{session}.out"
        os.mkfifo(fifo)
        subprocess.run(["tmux", "pipe-pane", "-t", session, "-o", f"cat > {fifo}"], check=True)
        self.fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        self.session = session

    def drain(self) -> None:
        try:
            while os.read(self.fd, 1 << 20):
                pass
        except BlockingIOError:
            pass

    def wait_for(self, texts: tuple[bytes, ...], timeout: float = 10) -> float:
        import select

        seen, deadline = b"", time.monotonic() + timeout
        while time.monotonic() < deadline:
            if select.select([self.fd], [], [], 0.5)[0]:
                try:
                    seen += os.read(self.fd, 1 << 20)
                except BlockingIOError:
                    continue
                if any(t in seen for t in texts):
                    return time.perf_counter()
        raise RuntimeError(f"{texts!r} never reached the terminal")

    def close(self) -> None:
        _tmux("pipe-pane", "-t", self.session)
        os.close(self.fd)


def _key_latencies(session: str, seconds: float, wait) -> list[float]:
    """Keys t and r in turn, 0.1 s apart, for ``seconds``: the seconds each took to show."""
    shows = {"t": ("Legend", "no NVIDIA GPU here"), "r": ("search the logs",)}
    latencies, key = [], "t"
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pressed = time.perf_counter()
        _tmux("send-keys", "-t", session, key)
        latencies.append(wait(shows[key]) - pressed)
        key = "r" if key == "t" else "t"
        time.sleep(0.1)
    return sorted(latencies)


def _p50_p99(latencies: list[float]) -> str:
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
    return f"{statistics.median(latencies) * 1000:.0f} / {p99 * 1000:.0f} ms"


def _ranks_shown(work: Path) -> float:
    """Seconds from `run ddp --nproc 2 --device cpu --tui` to both rank rows showing a samples/s figure."""
    import re

    session = "mgpu-bench-ranks"
    row = r"rank {} +running +[\d,]+ +[\d,.]+ +\d"
    start = _start_app(
        session,
        f"cd {work} && {APP} run ddp --nproc 2 --steps 100000 --device cpu --tui "
        f"--run-dir {work / 'ranks-runs'}",
    )
    app = _app_process(session)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        screen = _tmux("capture-pane", "-t", session, "-p")
        if re.search(row.format(0), screen) and re.search(row.format(1), screen):
            shown = time.perf_counter() - start
            break
        time.sleep(0.1)
    else:
        raise RuntimeError("the rank rows never showed a samples/s figure")
    _tmux("send-keys", "-t", session, "q")
    _wait_screen(session, "Quit and stop every rank")
    _tmux("send-keys", "-t", session, "y")
    _wait_exited(app, 30)
    _tmux("kill-session", "-t", session)
    return shown


def _quiet_app(work: Path) -> list[list[str]]:
    """The first frame, the idle app, and how soon a run's ranks show."""
    rows = []
    # First frame: from the Enter that starts the command to the tabs reaching the terminal.
    firsts = []
    for i in range(5):
        session = f"mgpu-bench-{i}"
        command = f"cd {work} && read go && exec {APP}"  # starts on the Enter below
        _tmux("new-session", "-d", "-s", session, "-x", "160", "-y", "50", command)
        output = PaneOutput(session, work)
        start = time.perf_counter()
        _tmux("send-keys", "-t", session, "Enter")
        firsts.append(output.wait_for((b"Dashboard",)) - start)
        output.close()
        if i < 4:
            _tmux("kill-session", "-t", session)
    rows.append(["first frame (median of 5)", f"{statistics.median(firsts):.2f} s", "<= 0.6 s"])
    # Idle: the last one, sampling at 1 Hz, for 20 s.
    app = _app_process("mgpu-bench-4")
    time.sleep(3)
    before = sum(app.cpu_times()[:2])
    time.sleep(20)
    idle = (sum(app.cpu_times()[:2]) - before) / 20 * 100
    _tmux("kill-session", "-t", "mgpu-bench-4")
    rows.append(["idle, sampling at 1 Hz", f"{idle:.2f}% of a core", "<= 1%"])
    rows.append(
        [
            "run ddp --nproc 2 --tui: both rank rows with samples/s (median of 3)",
            f"{statistics.median(_ranks_shown(work) for _ in range(3)):.1f} s",
            "<= 20 s",
        ]
    )
    return rows


def _flooded_app(work: Path, flood_seconds: float) -> list[list[str]]:
    """Under 4 ranks x 5,000 log lines a second: a key's latency, the app's memory, lines lost."""
    # Flood: 4 ranks x 5,000 lines/s; keys t and r switch views; time until the view shows.
    session = "mgpu-bench-flood"
    runs = work / "runs"
    _start_app(
        session,
        f"cd {work} && {APP} run ddp --nproc 4 --steps 1000000 --device cpu --tui "
        f"--run-dir {runs} -- --log-rate 5000",
    )
    app = _app_process(session)
    _wait_screen(session, "flood", timeout=60)
    output = PaneOutput(session, work)
    output.drain()
    peak_rss, stop = 0, False

    def watch_memory() -> None:
        nonlocal peak_rss
        while not stop:
            peak_rss = max(peak_rss, app.memory_info().rss)
            time.sleep(0.2)

    import threading

    watcher = threading.Thread(target=watch_memory, daemon=True)
    watcher.start()

    def shown_in_output(texts: tuple[str, ...]) -> float:
        found = output.wait_for(tuple(t.encode() for t in texts))
        output.drain()
        return found

    received = _key_latencies(session, flood_seconds, shown_in_output)
    output.close()
    polled = _key_latencies(session, flood_seconds, lambda texts: _wait_screen(session, texts))
    stop = True
    watcher.join()
    _tmux("send-keys", "-t", session, "q")
    _wait_screen(session, "Quit and stop every rank")
    _tmux("send-keys", "-t", session, "y")
    _wait_exited(app, 30)
    _tmux("kill-session", "-t", session)
    lost = checked = 0
    for log in runs.glob("*/logs/*/attempt_0/*/stdout.log"):
        numbers = [int(line.split()[1]) for line in log.read_text().splitlines() if line.startswith("flood ")]
        checked += len(numbers)
        lost += (max(numbers) + 1 - len(numbers)) if numbers else 0
    return [
        [f"flood: key to terminal, p50 / p99 of {len(received)}", _p50_p99(received), "p99 <= 100 ms"],
        [
            f"flood: key to screen read back by polling, p50 / p99 of {len(polled)}",
            _p50_p99(polled),
            "(for comparison)",
        ],
        ["flood: app memory (peak RSS)", f"{peak_rss / 2**20:.0f} MB", "<= 250 MB"],
        ["flood: lines on disk, lost", f"{checked:,} written, {lost} lost", "0 lost"],
    ]


def _bench_app(work: Path, rows: list, flood_seconds: float) -> str:
    _byte_compile()
    rows += _quiet_app(work)
    rows += _flooded_app(work, flood_seconds)
    return "the app in a 160x50 tmux terminal\n" + table(["what", "measured", "goal"], rows)
