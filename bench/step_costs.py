"""What the watch adds to a training step: the reporter's event (``reporter``), the bootstrap's hooks
(``bootstrap``), and taking each step apart (``anatomy``; issue 41).

The same loop (a DDP model over gloo, one rank, a DataLoader without workers, AdamW, one backward a
step) bare and with the step clock's wrappers alone (engine/rank/watch/step_clock.py: the timed backward
with its end-of-graph mark, made as in a job of several ranks, the optimizer's pre- and
post-hooks, the forward's two hooks, the DataLoader's ``__next__`` timed, a cut a step), in
interleaved pairs of processes: the median of each, and the median of the pairs' differences.
Goal: under 100 us a step. Beside it, the clock's own calls a step, timed in one process (a floor
the loop's noise can hide), and what the monitor spends on a job of 1,024 ranks (issue 45): each
rank's figures and the verdicts, over 200 steps each, computed once.
"""

from __future__ import annotations

import io
import statistics
import tempfile
import time

from common import alternated, clean_env, figure, table


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
    env = {**clean_env(), "OMP_NUM_THREADS": "1"}
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


LOOP = """
import statistics, sys, time
import torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
dist.init_process_group("gloo", rank=0, world_size=1, store=dist.HashStore())
torch.manual_seed(0)
model = DDP(torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
data = TensorDataset(torch.randn(4096, 32), torch.randint(0, 8, (4096,)))
cut = lambda: None
if sys.argv[1] == "clock":
    from mgpu_tui.engine.rank.watch import step_clock
    clock = step_clock.StepClock()
    clock.distributed = True  # as in a job of several ranks: each backward marks its graph's end
    step_clock.install(torch, clock)
    step_clock.hook_forward(model, clock, torch)
    iterators = torch.utils.data.dataloader._BaseDataLoaderIter
    iterators.__next__ = step_clock.timed(clock, "data", iterators.__next__)
    cut = clock.cut

def round_(steps):
    batches = iter(DataLoader(data, batch_size=8, shuffle=True))
    start = time.perf_counter()
    for _ in range(steps):
        x, y = next(batches)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        cut()
    return (time.perf_counter() - start) / steps * 1e6

round_(100)
print(statistics.median(round_(STEPS) for _ in range(3)))
"""

CALLS = """
import timeit, torch
from mgpu_tui.engine.rank.watch import step_clock
clock = step_clock.StepClock()
def one_step():  # a step's clock calls: data, forward, backward with its end, optimizer, cut
    for part in ("data", "forward", "backward", "optimizer"):
        clock.enter(part)
        if part == "backward":
            clock.graph_done()
        clock.leave(part)
    clock.cut()
print(min(timeit.repeat(one_step, number=20000, repeat=5)) / 20000 * 1e6)
"""


AT_SCALE = """
import random, time
from mgpu_tui.engine.run.figures.anatomy import StepParts, WINDOW
parts, rng = StepParts(), random.Random(0)
for rank in range(1024):
    for step in range(1, WINDOW + 21):
        v = tuple(rng.random() * 0.01 for _ in range(6))
        parts.add(rank, step, sum(v), v)
times = []
for _ in range(3):
    start = time.perf_counter()
    parts.figures(5, 1024)
    times.append(time.perf_counter() - start)
print(min(times) * 1000)
"""


def bench_anatomy(pairs: int, steps: int, env: dict) -> tuple[str, list[list[str]]]:
    calls = float(figure(CALLS, env=env))
    at_scale = float(figure(AT_SCALE, env=env))
    loops = alternated(LOOP.replace("STEPS", str(steps)), ("bare", "clock"), pairs, env)
    differences = [clock - bare for bare, clock in zip(loops["bare"], loops["clock"])]
    rows = [
        ["the clock's own calls a step (one process, best of 5)", f"{calls:.1f}"],
        [f"the loop bare ({pairs} processes, median)", f"{statistics.median(loops['bare']):.0f}"],
        [
            f"the loop with the step taken apart ({pairs} processes, median)",
            f"{statistics.median(loops['clock']):.0f}",
        ],
        ["added a step (median of the pairs' differences)", f"{statistics.median(differences):.0f}"],
        [
            "the figures and verdicts of 1,024 ranks, 200 steps each, once (best of 3)",
            f"{at_scale * 1000:,.0f}",
        ],
    ]
    title = "a step taken apart, 1 CPU rank, DDP + DataLoader + AdamW (goal < 100 us a step)"
    return title, rows
