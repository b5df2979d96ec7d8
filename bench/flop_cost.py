"""What counting a step's FLOPs costs a rank (bench/run.py's ``flops``; issues 42 and 54), and
taking its memory apart (``memory-parts``, issue 60: bench_memory_parts says how).

In a fresh process each, on the CPU, a model the GPT demo builds (demos/transformer.py), stepped as a
rank steps it (forward through the watch's own root hooks, model_root.HookedRoot; backward() inside
the count's window; AdamW), its steps interleaved with steps of the same model with those hooks set
aside (wrapping.hooks_set_aside: as the job runs bare):

- **a steady step's added cost**: once every shape is counted, each step only keys its forward's
  inputs and adds up what was kept. Timed alone, on a model that computes nothing (its input back):
  its steps with the root's hooks (model_root.HookedRoot: the batch, the step clock, the count's
  window) minus the same steps with them set aside, the best of 3 runs of 2,000, over the GPT's
  bare step. Goal: <= 1% of the step. (Interleaved pairs of the GPT's own steps, watched and bare,
  were tried and dropped: the same comparison of bare steps with bare steps gave medians of +200 us
  on this shared machine, more than the whole figure.)
- **an observed step's cost**: the step in which a new input shape is counted (the counting mode
  sees every operation it dispatches), against the same shape's steady step, once per shape: the
  first count of the process (the mode made and torch's formulas imported) and a later new shape.
  Not a step of the figures (aggregate.py leaves it out): the goal is that it comes once per shape.
- ``describe``, run at every training forward of the root: its median. Goal: < 20 us.

Every time is the process's main thread's CPU time (``time.thread_time``; torch on one thread, and a
CPU backward runs on the thread that calls it): on a machine shared with other work, wall time
swung by 20% from step to step, and the thread's own time holds still.

Shapes: gpt-tiny (2 blocks, width 64, 32 tokens) and GPT-2 small's blocks (gpt-125m: 12 blocks,
width 768, its vocabulary) on 64 tokens, so that a CPU step takes seconds, not minutes.
"""

from __future__ import annotations

import json
import subprocess
import sys

CHILD = """
import json, statistics, sys, time
import torch
sys.path.insert(0, sys.argv[2])
from mgpu_tui.demos.transformer import build_gpt
from mgpu_tui.engine.planning.shapes import model_shape
from mgpu_tui.engine.rank.watch import flops, wrapping
from torch.utils._python_dispatch import _get_current_dispatch_mode
from watched_steps import Watched
torch.set_num_threads(1)
shape = model_shape(sys.argv[1], **({"seq_len": 64} if sys.argv[1] == "gpt-125m" else {}))
torch.manual_seed(0)
model = build_gpt(shape)
watched = Watched(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
def ids(batch):
    return torch.randint(0, shape.vocab, (batch, shape.seq_len))
def loss_of(out):
    return out.float().square().mean()
def timed_watched(x):
    t = time.thread_time()
    counted = watched.step(x, loss_of=loss_of)
    optimizer.step()
    return time.thread_time() - t, counted
def timed_bare(x):  # the same model, the watch's hooks set aside: as the job runs bare
    with wrapping.hooks_set_aside():
        t = time.thread_time()
        model.zero_grad(set_to_none=True)
        loss_of(model(x)).backward()
        optimizer.step()
        return time.thread_time() - t
first, first_counted = timed_watched(ids(4))   # the process's first count
for _ in range(2):
    timed_bare(ids(4)), timed_watched(ids(4))
later, _ = timed_watched(ids(2))          # a new shape, later
steady_at_2 = statistics.median(timed_watched(ids(2))[0] for _ in range(3))
steps = int(sys.argv[3])
bares = [timed_bare(ids(4)) for _ in range(steps)]
assert not timed_watched(ids(4))[1].observed and _get_current_dispatch_mode() is None
# What the watch adds to a steady step, alone: a step of a model that computes nothing (its input
# back), with the root's hooks and the count's windows, against the same step with them set aside.
empty = torch.nn.Identity()
empty_watched = Watched(empty)
y = ids(4).float().requires_grad_()
def empty_step(n):
    t = time.thread_time()
    for _ in range(n):
        empty_watched.step(y, loss_of=lambda out: out.sum())
    return (time.thread_time() - t) / n
empty_step(100)
with_hooks = min(empty_step(2000) for _ in range(3))
with wrapping.hooks_set_aside():
    without = min(empty_step(2000) for _ in range(3))
calls = with_hooks - without
x = ids(4)
times = []
for _ in range(2000):
    t = time.thread_time()
    flops.describe(torch, (x,), {})
    times.append(time.thread_time() - t)
print(json.dumps({
    "bare_step": statistics.median(bares),
    "first": first, "later": later, "steady_at_2": steady_at_2,
    "describe": statistics.median(times), "flops": first_counted.flops, "calls": calls,
}))
"""


def bench_flops() -> tuple[str, list[tuple[str, str]]]:
    from pathlib import Path

    tests = str(Path(__file__).resolve().parents[1] / "tests")
    rows = []
    for name, steps in (("gpt-tiny", 50), ("gpt-125m", 3)):
        argv = [sys.executable, "-c", CHILD, name, tests, str(steps)]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=1800)
        if done.returncode != 0:
            rows.append((name, f"failed: {done.stderr.strip().splitlines()[-1:]}"))
            continue
        got = json.loads(done.stdout.strip().splitlines()[-1])
        rows += [
            (f"{name}: a bare step (median of {steps}, CPU time)", f"{got['bare_step'] * 1000:.1f} ms"),
            (
                f"{name}: the watch's hooks and the count's windows in a steady step, alone",
                f"{got['calls'] * 1e6:.1f} us ({got['calls'] / got['bare_step'] * 100:.3f}%)",
            ),
            (f"{name}: the process's first observed step (the mode made)", f"{got['first'] * 1000:.0f} ms"),
            (
                f"{name}: a later new shape's observed step, against its steady step",
                f"{got['later'] * 1000:.0f} ms vs {got['steady_at_2'] * 1000:.0f} ms",
            ),
            (f"{name}: describe, at each training forward", f"{got['describe'] * 1e6:.1f} us"),
            (f"{name}: FLOPs of a step of 4 sequences", f"{got['flops']:.3e}"),
        ]
    title = "flops: counting a step's FLOPs as it runs (goals: a steady step <= 1%, describe < 20 us)"
    return title, rows


MEMORY_CHILD = """
import json, statistics, sys, time
import torch
from mgpu_tui.demos.transformer import build_gpt
from mgpu_tui.engine.planning.shapes import model_shape
from mgpu_tui.engine.rank.watch.memory.accounting import Accounting
from mgpu_tui.engine.rank.watch.memory.creep import Creep
from mgpu_tui.engine.rank.watch.memory.saved import SavedTensors
torch.set_num_threads(1)
shape = model_shape(sys.argv[1], **({"seq_len": 64} if sys.argv[1] == "gpt-125m" else {}))
torch.manual_seed(0)
model = build_gpt(shape)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
accounting, creep = Accounting(), Creep()
accounting.optimizer_stepped(optimizer)
x = torch.randint(0, shape.vocab, (4, shape.seq_len))
def step():
    t = time.thread_time()
    model.zero_grad(set_to_none=True)
    loss = model(x).float().square().mean()
    loss.backward()
    optimizer.step()
    return time.thread_time() - t, loss
bares = []
for n in range(int(sys.argv[2])):
    took, loss = step()
    bares.append(took)
    creep.loss(loss)
reads = []
for n in range(200):
    t = time.thread_time()
    figures = accounting.read(torch, model)
    creep.at_step(n + 10, sys._getframe())
    reads.append(time.thread_time() - t)
def forward(saved):
    t = time.thread_time()
    if saved is not None:
        saved.open(torch, model)
    out = model(x)
    if saved is not None:
        saved.close()
    took = time.thread_time() - t
    del out
    return took
plain, observed = [], []
for _ in range(5):
    plain.append(forward(None))
    saved = SavedTensors()
    observed.append(forward(saved))
print(json.dumps({"bare_step": statistics.median(bares), "read": statistics.median(reads),
                  "plain": statistics.median(plain), "observed": statistics.median(observed),
                  "held": sum(figures.values()), "activations": saved.take()}))
"""


def bench_memory_parts() -> tuple[str, list[tuple[str, str]]]:
    """What taking a rank's memory apart costs (bench/run.py's ``memory-parts``; issue 60).

    In a fresh process each, on the CPU, one thread, a model the GPT demo builds (demos/transformer.py)
    with AdamW, stepped bare; every time the main thread's CPU time (``time.thread_time``: wall time
    swings on a shared machine):

    - **a steady step's added cost**: what the watch does at each step's end for the memory, alone: the
      accounting (memory/accounting.py: parameters, buffers, gradients and the optimizer's state, each
      storage once) and the creep's count (memory/creep.py), the median of 200, against a bare step.
      It reads sizes and allocates nothing; where a read would take more than 0.5% of the step
      (memory/watch.py's BUDGET), the watch reads it every few steps, so a step pays at most that.
      Goal: <= 1% of the step.
    - **an observed step's forward**: the forward under the saved-tensor hooks (memory/saved.py) against
      the same forward bare, the median of 5 each, interleaved; it comes on the observed steps alone
      (once per input shape, as the FLOP count's window)."""
    rows = []
    for name, steps in (("gpt-tiny", 30), ("gpt-125m", 3)):
        done = subprocess.run(
            [sys.executable, "-c", MEMORY_CHILD, name, str(steps)], capture_output=True, text=True
        )
        if done.returncode != 0:
            rows.append((name, f"failed: {done.stderr.strip().splitlines()[-1:]}"))
            continue
        got = json.loads(done.stdout.strip().splitlines()[-1])
        rows += [
            (f"{name}: a bare step (median of {steps}, CPU time)", f"{got['bare_step'] * 1000:.1f} ms"),
            (
                f"{name}: the accounting and the creep's count at a step's end",
                f"{got['read'] * 1e6:.0f} us ({got['read'] / got['bare_step'] * 100:.3f}%)",
            ),
            (
                f"{name}: an observed step's forward, saved tensors counted, against bare",
                f"{got['observed'] * 1000:.1f} ms vs {got['plain'] * 1000:.1f} ms",
            ),
            (f"{name}: held / activations of 4 sequences", f"{got['held']:,} B / {got['activations']:,} B"),
        ]
    title = (
        "memory-parts: where the memory goes, at each step and on an observed one (goal: a steady step <= 1%)"
    )
    return title, rows
