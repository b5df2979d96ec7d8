"""Benchmarks of mgpu-tui itself, each printed as a table.

    python bench/run.py                  # every entry
    python bench/run.py overhead --pairs 5
    python bench/run.py reporter help

Entries:

- ``overhead``: the same ddp demo with the same flags under bare torchrun and under
  ``mgpu-tui run``, alternated pair by pair so drifts in the machine hit both
  alike. Both write events (MGPU_RUN_DIR is set for the bare run too), so the
  ranks do the same work and both are measured from the same events. Goals:
  steady-state throughput ratio >= 0.99, launch-to-first-step within 0.2 s of
  bare torchrun, wall time at most 5% more.
- ``transformer``: the same comparison on the transformer workload (``--model gpt-tiny``:
  a 2-block GPT, sequences of 32 tokens), its throughput also in tokens/s. Same goals.
- ``reporter``: the cost of one step event written by the reporter. Goal: < 20 us.
- ``bootstrap``: what the bootstrap's hooks (engine/rank/watch/script_watch.py) add to a training step of
  an unchanged script, in microseconds, on the CPU: the same small DDP loop (one rank, gloo; 4
  micro-batches a step, AdamW) timed bare, then with the hooks in (they cannot be taken out again),
  the step's event written included. Goal: < 200 us a step (a GPU's throughput ratio is the GPU
  issue's to measure).
- ``anatomy``: what taking each step apart (data, forward, backward, communication, optimizer,
  host: engine/rank/watch/step_clock.py) adds to a step, in interleaved pairs (bench/step_anatomy.py).
  Goal: < 100 us a step.
- ``flops``: what counting a step's FLOPs costs a rank (bench/flop_cost.py says how). Goals: a
  count < 100 ms once per input shape, outside the measured steps; < 20 us at each forward.
- ``large-job``: the login node's view (the app, opened on the shared folder) of a synthetic job of
  64, 256 and 1,024 ranks, 8 a node, one rank hung and one slow (bench/large_job.py says how).
  Goals at 1,024: under one core and 200 MB, a new step shown at least every 2 s, the hung rank
  called stalled within the stall timeout + 5 s with its node first, the slow rank named.
- ``first-step``: an unchanged script's first step, from launch, under ``mgpu-tui run --script``
  with the bootstrap and with ``--no-instrument``, pairs alternated; the script itself prints when
  its first step ended. Goal: the bootstrap adds <= 0.3 s.
- ``exec-start`` and ``exec-first-step``: what ``mgpu-tui exec`` costs a command's processes
  (bench/exec_costs.py says how). Goals: <= 5 ms at start, <= 0.3 s to the first step.
- ``help``: how long ``mgpu-tui --help`` takes. Goal: < 0.2 s.
- ``telemetry``: the CPU one full sample costs, of 8 GPUs (the NVML stand-in of
  the tests, an HGX H100 box), the host and 16 real processes; and the share of
  a core that sampling at 1 Hz takes. Goals: <= 5 ms a sample, <= 1% of a core.
- ``app``: the app in a real 160x50 terminal (tmux): time to the first frame;
  CPU while idle; how soon ``run ddp --nproc 2 --tui`` shows both ranks' rows with a
  samples/s figure (polled every 0.1 s); and under a flood of 4 ranks x 5,000 log lines a second for
  10 s, how long a key press takes to show, the app's memory, and whether every
  line reached the log files. Goals: first frame <= 0.6 s, idle <= 1% of a core,
  rank rows <= 20 s, key p99 <= 100 ms, memory <= 250 MB, no line lost. The package is byte-compiled
  first, as pip does and as Python does on a first run (this machine sets
  PYTHONDONTWRITEBYTECODE, which would otherwise make every start compile it).
  The first frame and a key's view count as shown when the terminal receives the
  bytes that draw them (tmux pipe-pane, read as they come). Reading the screen back
  instead, by polling capture-pane every 5 ms, costs this 2-core machine half a core
  and so slows what it measures; the key figure measured that way is printed too.
- ``check``: ``mgpu-tui --check --level 1`` and the default level 2, end to end.
  Goals: <= 3 s and <= 20 s on this 2-core machine.
- ``nccl``: ``read_nccl_log`` (what ``mgpu-tui nccl`` and a NCCL run's summary read) over 100 MiB
  of real NCCL_DEBUG=INFO lines repeated as ever new processes. Goal: linear in its input (a
  rank writes these logs: bounded work a line), 100 MiB in < 60 s and < 500 MiB of memory.
- ``memory``: the planner against what the ranks measured: ``run ddp|fsdp --nproc 2 --device cpu``
  on the 21M-parameter custom GPT of docs/compare.md at global batches 8 and 32, the largest
  rank's live tensors at their peak (torch's MemTracker) against the plan's peak, with the
  process's resident set beside. Goal: the plan within 10% of the tensors, and never below.
- ``compare``: ``compare ddp fsdp pipeline``'s wall time against the sum of its
  runs' own durations (launch to exit). Goal: it adds <= 2%.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from exec_costs import bench_exec_first_step, bench_exec_start
from first_step import first_step_times
from flop_cost import bench_flops
from large_job import bench_large_job
from pairs import alternated, figure
from step_anatomy import bench_anatomy

from mgpu_tui.console import table as console_table
from mgpu_tui.engine.planning.shapes import MODELS
from mgpu_tui.engine.run.figures.aggregate import read_events

CLI = str(Path(sys.executable).with_name("mgpu-tui"))
# The app in a terminal: COLUMNS and LINES, where set, would win over the terminal's size.
APP = f"env -u COLUMNS -u LINES {CLI}"


def table(headers, rows) -> str:
    """The first column (what was measured) reads left to right; the figures line up on the right."""
    return console_table(headers, [[str(c) for c in r] for r in rows], right=range(1, len(headers)))


# ---- overhead ---------------------------------------------------------------------


def _clean_env() -> dict:
    return {k: v for k, v in os.environ.items() if not k.startswith(("PET_", "MGPU_"))}


def _bare(work: Path, demo_flags: list[str], nproc: int) -> dict:
    run_dir = work / f"bare-{time.monotonic_ns()}"
    run_dir.mkdir()
    env = _clean_env() | {"MGPU_RUN_DIR": str(run_dir)}
    argv = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        str(nproc),
        "-m",
        "mgpu_tui.demos.ddp",
        *demo_flags,
    ]
    started = time.time()
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return _measure(run_dir, started, time.time())


def _engine(work: Path, demo_flags: list[str], nproc: int) -> dict:
    root = work / f"engine-{time.monotonic_ns()}"
    argv = [CLI, "run", "ddp", "--nproc", str(nproc), "--run-dir", str(root), *demo_flags]
    started = time.time()
    subprocess.run(argv, env=_clean_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    ended = time.time()
    (run_dir,) = root.iterdir()
    return _measure(run_dir, started, ended)


def _measure(run_dir: Path, started: float, ended: float) -> dict:
    stats = read_events(run_dir).stats()
    return {
        "wall": ended - started,
        "first_step": stats.first_step_t - started,
        "throughput": stats.samples_per_s,
    }


def bench_overhead(pairs: int, steps: int, nproc: int, model: str = "mlp") -> str:
    demo_flags = ["--steps", str(steps), "--batch-size", "64", "--device", "cpu", "--model", model]
    tokens = MODELS[model].seq_len if model in MODELS else 0
    rows, bare_all, engine_all = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        _bare(work, ["--steps", "5", "--device", "cpu", "--model", model], nproc)  # warm the file cache once
        for i in range(pairs):
            # Alternate which goes first, so neither always runs on a warmer machine.
            first, second = (_bare, _engine) if i % 2 == 0 else (_engine, _bare)
            a = first(work, demo_flags, nproc)
            b = second(work, demo_flags, nproc)
            bare, engine = (a, b) if first is _bare else (b, a)
            bare_all.append(bare)
            engine_all.append(engine)
            rows.append(
                [
                    i + 1,
                    f"{bare['throughput']:,.0f}",
                    f"{engine['throughput']:,.0f}",
                    f"{engine['throughput'] / bare['throughput']:.3f}",
                    f"{bare['first_step']:.2f}",
                    f"{engine['first_step']:.2f}",
                    f"{engine['first_step'] - bare['first_step']:+.2f}",
                    f"{bare['wall']:.2f}",
                    f"{engine['wall']:.2f}",
                    f"{engine['wall'] / bare['wall']:.3f}",
                ]
            )

    def med(runs, key):
        return statistics.median(r[key] for r in runs)

    rows.append(
        [
            "median",
            f"{med(bare_all, 'throughput'):,.0f}",
            f"{med(engine_all, 'throughput'):,.0f}",
            f"{med(engine_all, 'throughput') / med(bare_all, 'throughput'):.3f}",
            f"{med(bare_all, 'first_step'):.2f}",
            f"{med(engine_all, 'first_step'):.2f}",
            f"{med(engine_all, 'first_step') - med(bare_all, 'first_step'):+.2f}",
            f"{med(bare_all, 'wall'):.2f}",
            f"{med(engine_all, 'wall'):.2f}",
            f"{med(engine_all, 'wall') / med(bare_all, 'wall'):.3f}",
        ]
    )
    headers = [
        "pair",
        "bare samples/s",
        "mgpu-tui samples/s",
        "ratio",
        "bare 1st step s",
        "mgpu-tui 1st step s",
        "diff s",
        "bare wall s",
        "mgpu-tui wall s",
        "wall ratio",
    ]
    title = (
        f"engine overhead: ddp on {model}, {nproc} ranks, {steps} steps, global batch 64, cpu/gloo; "
        f"goals: ratio >= 0.99, 1st-step diff <= +0.20 s, wall ratio <= 1.05"
    )
    if tokens:
        title += (
            f"\n(tokens/s = samples/s x {tokens}: bare {med(bare_all, 'throughput') * tokens:,.0f}, "
            f"mgpu-tui {med(engine_all, 'throughput') * tokens:,.0f})"
        )
    return title + "\n" + table(headers, rows)


# ---- reporter ----------------------------------------------------------------------


def bench_reporter(events: int) -> str:
    from mgpu_tui.engine.rank.reporter import Reporter

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        # Its own lines (the hello) go to a buffer, not into this table.
        reporter = Reporter(rank=0, world_size=1, run_dir=tmp, print_every=10**9, stream=io.StringIO())
        reporter.hello(mode="bench", device="cpu")
        costs = []
        for _ in range(5):
            start = time.perf_counter()
            for i in range(events):
                reporter.step(i + 1, samples=32, loss=0.5, mem_bytes=123456789, mem_peak_bytes=223456789)
            costs.append((time.perf_counter() - start) / events * 1e6)
        reporter.close()
    rows.append(["step event", events, f"{statistics.median(costs):.2f}", f"{min(costs):.2f}"])
    return "reporter cost per event (goal < 20 us)\n" + table(["event", "n", "median us", "best us"], rows)


# ---- help --------------------------------------------------------------------------


BOOTSTRAP_HOOKS = """
import statistics, sys, tempfile, time, timeit
import torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
dist.init_process_group("gloo", rank=0, world_size=1, store=dist.HashStore())
from mgpu_tui.engine.rank.watch.script_watch import ScriptReporter, ScriptWatch
reporter = ScriptReporter(rank=0, world_size=1, run_dir=tempfile.mkdtemp(), print_every=10**9)
reporter.hello(mode="script", device="unknown")
watch = ScriptWatch(reporter, "bench")
watch.start()  # torch is imported: the hooks go in now
model = DDP(torch.nn.Sequential(torch.nn.Embedding(64, 32), torch.nn.Flatten(), torch.nn.Linear(32 * 8, 64)))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
x, y = torch.randint(0, 64, (4, 8)), torch.randint(0, 64, (4,))
for _ in range(50):  # a few real steps: the watch is in the state it has mid-training
    for _ in range(4):
        (torch.nn.functional.cross_entropy(model(x), y) / 4).backward()
    optimizer.step(); optimizer.zero_grad()
loss = torch.tensor(0.5)

def us(fn, n=5000):
    return min(timeit.repeat(fn, number=n, repeat=5)) / n * 1e6

def one_step():  # what the hooks do for a step of 4 micro-batches, without the training itself
    for _ in range(4):
        watch._before_forward(model, (x,), {})
        watch.on_backward(loss)
    watch.after_optimizer_step(optimizer, (), {})

def counted():
    watch.on_backward(loss)
    watch.after_optimizer_step(optimizer, (), {})

parts = {"forward pre-hook (x4)": 4 * us(lambda: watch._before_forward(model, (x,), {})),
         "backward hook (x4)": 4 * us(lambda: watch.on_backward(loss)),
         "a step counted (loss, memory, event)": us(counted, 2000)}
print(repr({"parts": parts, "step": us(one_step, 2000), "counted": watch.steps}))
watch.finish(); reporter.close()
"""

BOOTSTRAP_LOOP = """
import statistics, sys, tempfile, time
import torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
dist.init_process_group("gloo", rank=0, world_size=1, store=dist.HashStore())
if sys.argv[1] == "hooked":
    from mgpu_tui.engine.rank.watch.script_watch import ScriptReporter, ScriptWatch
    reporter = ScriptReporter(rank=0, world_size=1, run_dir=tempfile.mkdtemp(), print_every=10**9)
    reporter.hello(mode="script", device="unknown")
    ScriptWatch(reporter, "bench").start()
torch.manual_seed(0)
model = DDP(torch.nn.Sequential(torch.nn.Embedding(64, 32), torch.nn.Flatten(), torch.nn.Linear(32 * 8, 64)))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
x, y = torch.randint(0, 64, (4, 8)), torch.randint(0, 64, (4,))

def round_(steps):
    start = time.perf_counter()
    for _ in range(steps):
        for _ in range(4):
            (torch.nn.functional.cross_entropy(model(x), y) / 4).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return (time.perf_counter() - start) / steps * 1e6

round_(200)
print(statistics.median(round_(STEPS) for _ in range(3)))
"""


def bench_bootstrap(steps: int, pairs: int = 5) -> str:
    """The hooks' own cost a step (each hook timed on the real objects, times its calls a step), and
    beside it the whole loop bare and hooked in alternated processes, whose difference this machine's
    noise (a few percent of a 2 ms step) can hide."""
    env = {**_clean_env(), "OMP_NUM_THREADS": "1"}
    hooks = eval(figure(BOOTSTRAP_HOOKS, env=env))
    loops = alternated(BOOTSTRAP_LOOP.replace("STEPS", str(steps)), ("bare", "hooked"), pairs, env)
    rows = [[part, f"{cost:.1f}"] for part, cost in hooks["parts"].items()]
    rows.append(["the hooks, a whole step", f"{hooks['step']:.1f}"])
    bare, hooked = statistics.median(loops["bare"]), statistics.median(loops["hooked"])
    rows += [
        [f"the loop bare ({pairs} processes, median)", f"{bare:.0f}"],
        [f"the loop hooked ({pairs} processes, median)", f"{hooked:.0f}"],
    ]
    title = "bootstrap hooks, 4 micro-batches a step, 1 CPU rank, DDP + AdamW (goal < 200 us a step)"
    return title + "\n" + table(["", "us"], rows)


FIRST_STEP_SCRIPT = """
import os, sys, time, torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
dist.init_process_group("gloo")
model = DDP(torch.nn.Linear(64, 8))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(5):
    model(torch.randn(16, 64)).pow(2).mean().backward()
    optimizer.step()
    optimizer.zero_grad()
    if step == 0:
        print(f"first step ended {time.time():.6f}", flush=True)
dist.destroy_process_group()
"""


def bench_first_step(pairs: int) -> str:
    """Seconds from the command's start to the end of the script's first step, as the script's own
    rank 0 printed it: with the bootstrap and bare, alternated."""

    def line(*ours: str):
        return lambda script, runs: [
            CLI,
            "run",
            "--script",
            str(script),
            "--nproc",
            "2",
            "--run-dir",
            str(runs),
            "--quiet",
            *ours,
        ]

    lines = {"bootstrap": line(), "--no-instrument": line("--no-instrument")}
    times = first_step_times(FIRST_STEP_SCRIPT, lines, "logs/*/attempt_0/0/stdout.log", pairs)
    base = statistics.median(times["--no-instrument"])
    rows = [
        [how, pairs, f"{statistics.median(t):.2f}", f"{statistics.median(t) - base:+.2f}"]
        for how, t in times.items()
    ]
    return "an unchanged script's first step, from launch (goal: the bootstrap adds <= 0.3 s)\n" + table(
        ["", "runs", "median s", "vs bare"], rows
    )


def bench_help(repeats: int) -> str:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run([CLI, "--help"], stdout=subprocess.DEVNULL, check=True)
        times.append(time.perf_counter() - start)
    row = ["mgpu-tui --help", repeats, f"{statistics.median(times):.3f}", f"{max(times):.3f}"]
    return "CLI start-up (goal < 0.2 s)\n" + table(["command", "n", "median s", "worst s"], [row])


# ---- telemetry ---------------------------------------------------------------------


def bench_telemetry(samples: int, seconds: float) -> str:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from mgpu_tui.engine.machine import nvml
    from mgpu_tui.engine.machine.telemetry import Sampler
    from mgpu_tui.engine.machine.topology import parse_topo_text
    from nvml_standin import machine_from_topology, standin

    fixture = Path(__file__).resolve().parent.parent / "tests/fixtures/topology/h100-sxm-8x-nvswitch.txt"
    machine = machine_from_topology(
        parse_topo_text(fixture.read_text()), "NVIDIA H100 80GB HBM3", 80, nvlink_rate=100 << 30
    )
    nvml.use_library(standin(machine))
    sleepers = [subprocess.Popen(["sleep", "600"]) for _ in range(16)]
    try:
        ranks = {r: (p.pid, machine.gpus[r % 8].uuid) for r, p in enumerate(sleepers)}
        sampler = Sampler(interval=1.0, ranks=lambda: ranks)
        for _ in range(3):
            sampler.sample()  # first samples set up process handles and counters
        start = time.process_time()
        for _ in range(samples):
            snap = sampler.sample()
        per_sample_ms = (time.process_time() - start) / samples * 1000
        assert len(snap.gpus) == 8 and len(snap.ranks) == 16

        sampler.start()
        start_cpu, start_wall = time.process_time(), time.monotonic()
        time.sleep(seconds)
        share = (time.process_time() - start_cpu) / (time.monotonic() - start_wall) * 100
        sampler.stop()
    finally:
        for p in sleepers:
            p.kill()
            p.wait()
        nvml.use_library(None)
    rows = [
        ["one sample: 8 GPUs + host + 16 processes", f"{per_sample_ms:.2f} ms CPU", "<= 5 ms"],
        [f"sampling at 1 Hz for {seconds:.0f} s", f"{share:.2f}% of a core", "<= 1%"],
    ]
    return "telemetry cost (NVML stand-in)\n" + table(["what", "measured", "goal"], rows)


# ---- app -----------------------------------------------------------------------------


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


def _bench_app(work: Path, rows: list, flood_seconds: float) -> str:
    _byte_compile()
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
    rows += [
        [f"flood: key to terminal, p50 / p99 of {len(received)}", _p50_p99(received), "p99 <= 100 ms"],
        [
            f"flood: key to screen read back by polling, p50 / p99 of {len(polled)}",
            _p50_p99(polled),
            "(for comparison)",
        ],
        ["flood: app memory (peak RSS)", f"{peak_rss / 2**20:.0f} MB", "<= 250 MB"],
        ["flood: lines on disk, lost", f"{checked:,} written, {lost} lost", "0 lost"],
    ]
    return "the app in a 160x50 tmux terminal\n" + table(["what", "measured", "goal"], rows)


# ---- check and compare ---------------------------------------------------------------


def _timed(argv: list[str], env: dict | None = None) -> tuple[float, subprocess.CompletedProcess]:
    started = time.perf_counter()
    done = subprocess.run(argv, env=env or _clean_env(), capture_output=True, text=True)
    return time.perf_counter() - started, done


def bench_check(repeats: int) -> str:
    """``--check --level 1`` and the default level 2, end to end, as a user runs them."""
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for level, goal in (("1", 3.0), ("2", 20.0)):
            times, counts = [], []
            for _ in range(repeats):
                seconds, done = _timed([CLI, "--check", "--level", level, "--json", "-", "--run-dir", work])
                if done.returncode != 0:
                    raise SystemExit(
                        f"--check --level {level} exited {done.returncode}: {done.stderr[-500:]}"
                    )
                times.append(seconds)
                counts.append(len(json.loads(done.stdout)["checks"]))
            rows.append(
                [
                    f"--check --level {level}",
                    f"{statistics.median(times):.2f} s",
                    f"{min(times):.2f}-{max(times):.2f} s",
                    str(counts[0]),
                    f"<= {goal:g} s",
                ]
            )
    return f"mgpu-tui --check, {repeats} runs each (median)\n" + table(
        ["command", "wall", "range", "checks", "goal"], rows
    )


def bench_compare(repeats: int, steps: int) -> str:
    """What compare adds to the runs it makes: its wall time minus the sum of the runs' own durations."""

    rows = []
    with tempfile.TemporaryDirectory() as work:
        for i in range(repeats):
            argv = [
                CLI,
                "compare",
                "ddp",
                "fsdp",
                "pipeline",
                "--nproc",
                "2",
                "--steps",
                str(steps),
                "--device",
                "cpu",
                "--json",
                "--run-dir",
                work,
            ]
            seconds, done = _timed(argv)
            if done.returncode != 0:
                raise SystemExit(f"compare exited {done.returncode}: {done.stderr[-500:]}")
            report = json.loads(done.stdout.strip().splitlines()[-1])
            runs = sum(r["duration_s"] for r in report["rows"])
            # The same rows again, read from the finished runs' records (compare --runs): no rank runs.
            folders = [r["run_dir"] for r in report["rows"]]
            again, redone = _timed([CLI, "compare", "--runs", *folders, "--out", f"{work}/again-{i}.json"])
            if redone.returncode != 0:
                raise SystemExit(f"compare --runs exited {redone.returncode}: {redone.stderr[-500:]}")
            rows.append(
                [
                    str(i + 1),
                    f"{seconds:.2f} s",
                    f"{runs:.2f} s",
                    f"{seconds - runs:.2f} s",
                    f"{100 * (seconds - runs) / runs:.1f}%",
                    f"{again:.2f} s",
                ]
            )
    headers = ["#", "compare wall", "sum of runs", "added", "added %", "--runs of them"]
    return (
        f"compare ddp fsdp pipeline --nproc 2 --steps {steps} (CPU): wall vs the runs' own time; "
        "goal <= 2%; the same compared again from their records (compare --runs): goal < 2 s\n"
        + table(headers, rows)
    )


MEMORY_MODEL = ["--model", "custom", "--layers", "4", "--d-model", "512", "--heads", "8"]
MEMORY_MODEL += ["--seq-len", "128", "--vocab", "8192"]


def bench_memory(batches: tuple[int, ...] = (8, 32)) -> str:
    """The plan's peak against the live tensors' peak the ranks measured, per mode and batch."""
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for mode in ("ddp", "fsdp"):
            for batch in batches:
                argv = [CLI, "run", mode, "--nproc", "2", "--steps", "4", "--device", "cpu", *MEMORY_MODEL]
                argv += ["--batch-size", str(batch), "--json", "--run-dir", work]
                _, done = _timed(argv)
                if done.returncode != 0:
                    raise SystemExit(f"run exited {done.returncode}: {done.stderr[-500:]}")
                memory = json.loads(done.stdout.strip().splitlines()[-1])["memory"]
                top = max(memory, key=lambda m: m["tensor_peak_bytes"])
                measured, planned = top["tensor_peak_bytes"], top["predicted_total_bytes"]
                off = planned / measured - 1
                verdict = "ok" if 0 <= off <= 0.10 else "MISSED"
                rows.append(
                    [
                        mode,
                        str(batch),
                        f"{measured / 2**20:,.1f} MiB",
                        f"{planned / 2**20:,.1f} MiB",
                        f"{100 * off:+.1f}%",
                        f"{top['peak_bytes'] / 2**20:,.0f} MiB",
                        verdict,
                    ]
                )
    return (
        "the plan's peak against the live tensors' (21M-parameter GPT, 2 CPU ranks); goal: within 10%, "
        "never below\n"
        + table(["mode", "batch", "tensors at peak", "plan", "plan off", "process (RSS)", "goal"], rows)
    )


NCCL_SCRIPT = """
import resource, sys, time
from mgpu_tui.engine.machine.nccl_log import read_nccl_log
started = time.perf_counter()
with open(sys.argv[1], encoding="utf-8", errors="replace") as f:
    reading = read_nccl_log(f)
took = time.perf_counter() - started
print(reading.lines, took, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
"""


def bench_nccl(megabytes: int) -> str:
    """``read_nccl_log`` over ``megabytes`` of NCCL_DEBUG=INFO output: the recorded H100 log's lines,
    written again and again as new processes and communicators (a new pid and comm every 300 lines,
    a rank's start-up), read line by line as a file streams them."""
    source = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "nccl"
    lines = [
        line
        for path in sorted(source.glob("*.log"))
        for line in path.read_text(errors="replace").splitlines(keepends=True)
    ]
    with tempfile.TemporaryDirectory() as work:
        log = Path(work) / "nccl.log"
        written, copy = 0, 0
        with open(log, "w") as f:
            while written < megabytes << 20:
                copy += 1
                text = "".join(lines).replace(":", f":{copy}", 1)  # another process's start-up
                text = text.replace("comm 0x", f"comm 0x{copy:x}")
                f.write(text)
                written += len(text)
        done = subprocess.run(
            [sys.executable, "-c", NCCL_SCRIPT, str(log)], capture_output=True, text=True, check=True
        )
        count, took, peak = done.stdout.split()
    rows = [
        (f"read_nccl_log, {written / 2**20:.0f} MiB ({int(count):,} lines)", f"{float(took):.1f} s"),
        ("  its process's peak memory (RSS)", f"{int(peak) / 2**20:.0f} MiB"),
    ]
    return table(("nccl: a large log (goal: linear; 100 MiB < 60 s, < 500 MiB)", "measured"), rows)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "entries",
        nargs="*",
        choices=(
            "overhead",
            "transformer",
            "reporter",
            "bootstrap",
            "anatomy",
            "flops",
            "large-job",
            "first-step",
            "exec-start",
            "exec-first-step",
            "help",
            "telemetry",
            "app",
            "check",
            "compare",
            "nccl",
            "memory",
            [],
        ),
        default=[],
    )
    parser.add_argument(
        "--pairs", type=int, help="overhead: bare/engine pairs (default 3); first-step: pairs (default 8)"
    )
    parser.add_argument("--steps", type=int, default=300, help="overhead: steps per run (default 300)")
    parser.add_argument("--nproc", type=int, default=2, help="overhead: ranks (default 2)")
    args = parser.parse_args()
    entries = args.entries or [
        "help",
        "reporter",
        "bootstrap",
        "anatomy",
        "flops",
        "large-job",
        "first-step",
        "exec-start",
        "exec-first-step",
        "telemetry",
        "app",
        "check",
        "compare",
        "nccl",
        "memory",
        "overhead",
        "transformer",
    ]
    print(f"mgpu-tui bench on {os.cpu_count()} CPU(s), Python {sys.version.split()[0]}\n", flush=True)
    for entry in entries:
        if entry == "overhead":
            print(bench_overhead(args.pairs or 3, args.steps, args.nproc), flush=True)
        elif entry == "transformer":
            print(bench_overhead(args.pairs or 3, args.steps, args.nproc, model="gpt-tiny"), flush=True)
        elif entry == "reporter":
            print(bench_reporter(20_000), flush=True)
        elif entry == "bootstrap":
            print(bench_bootstrap(300), flush=True)
        elif entry == "anatomy":
            title, rows = bench_anatomy(args.pairs or 7, 300, {**_clean_env(), "OMP_NUM_THREADS": "1"})
            print(title + "\n" + table(["", "us"], rows), flush=True)
        elif entry == "large-job":
            title, rows = bench_large_job()
            print(title + "\n" + table(["", "measured"], rows), flush=True)
        elif entry == "flops":
            title, rows = bench_flops()
            print(title + "\n" + table(["", "measured"], rows), flush=True)
        elif entry == "first-step":
            print(bench_first_step(args.pairs or 8), flush=True)
        elif entry in ("exec-start", "exec-first-step"):
            title, rows = (
                bench_exec_start(args.pairs or 60)
                if entry == "exec-start"
                else bench_exec_first_step(args.pairs or 30)
            )
            print(
                title
                + "\n"
                + table(["", "pairs", "median (ms)" if entry == "exec-start" else "median (s)"], rows),
                flush=True,
            )
        elif entry == "telemetry":
            print(bench_telemetry(200, 10.0), flush=True)
        elif entry == "app":
            print(bench_app(10.0), flush=True)
        elif entry == "check":
            print(bench_check(3), flush=True)
        elif entry == "compare":
            print(bench_compare(3, 30), flush=True)
        elif entry == "nccl":
            print(bench_nccl(100), flush=True)
        elif entry == "memory":
            print(bench_memory(), flush=True)
        else:
            print(bench_help(20), flush=True)
        print(flush=True)


if __name__ == "__main__":
    main()
