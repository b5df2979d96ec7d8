"""What counting a step's FLOPs costs a rank (bench/run.py's ``flops``; issues 42 and 54).

In a fresh process each, on the CPU, a model the GPT demo builds (demos/transformer.py), stepped as a
rank steps it (forward through the watch's own root hooks, model_root.HookedRoot; backward() inside
the count's window; AdamW), next to a copy of it without the hooks (a deep copy leaves them out),
their steps interleaved:

- **a steady step's added cost**: once every shape is counted, each step only keys its forward's
  inputs and adds up what was kept: those calls timed alone (5,000 steps' worth: deterministic, the
  figure the goal is held to), and the median of the per-step differences (watched minus bare) over
  interleaved pairs (noisy on a shared machine: a check that nothing else is added). Goal: <= 1% of
  the step.
- **an observed step's cost**: the step in which a new input shape is counted (the counting mode
  sees every operation it dispatches), against the same shape's steady step, once per shape: the
  first count of the process (the mode made and torch's formulas imported) and a later new shape.
  Not a step of the figures (aggregate.py leaves it out): the goal is that it comes once per shape.
- ``describe``, run at every training forward of the root: its median. Goal: < 20 us.

Shapes: gpt-tiny (2 blocks, width 64, 32 tokens) and GPT-2 small's blocks (gpt-125m: 12 blocks,
width 768, its vocabulary) on 64 tokens, so that a CPU step takes seconds, not minutes.
"""

from __future__ import annotations

import json
import subprocess
import sys

CHILD = """
import copy, json, statistics, sys, time
import torch
sys.path.insert(0, sys.argv[2])
from mgpu_tui.demos.transformer import build_gpt
from mgpu_tui.engine.planning.shapes import model_shape
from mgpu_tui.engine.rank.watch import flops
from watched_steps import Watched
torch.set_num_threads(1)
shape = model_shape(sys.argv[1], **({"seq_len": 64} if sys.argv[1] == "gpt-125m" else {}))
torch.manual_seed(0)
model = build_gpt(shape)
bare = copy.deepcopy(model)
watched = Watched(model)
opts = {m: torch.optim.AdamW(m.parameters(), lr=1e-4) for m in (model, bare)}
def ids(batch):
    return torch.randint(0, shape.vocab, (batch, shape.seq_len))
def loss_of(out):
    return out.float().square().mean()
def timed_watched(x):
    t = time.perf_counter()
    counted = watched.step(x, loss_of=loss_of)
    opts[model].step()
    return time.perf_counter() - t, counted
def timed_bare(x):
    t = time.perf_counter()
    bare.zero_grad(set_to_none=True)
    loss_of(bare(x)).backward()
    opts[bare].step()
    return time.perf_counter() - t
first, first_counted = timed_watched(ids(4))   # the process's first count
for _ in range(2):
    timed_bare(ids(4)), timed_watched(ids(4))
later, _ = timed_watched(ids(2))          # a new shape, later
steady_at_2 = statistics.median(timed_watched(ids(2))[0] for _ in range(3))
pairs = int(sys.argv[3])
differences, bares = [], []
for i in range(pairs):  # in turn: bare first, then watched first (the first of a pair is the slower)
    x = ids(4)
    if i % 2:
        w, c = timed_watched(x)
        b = timed_bare(x)
    else:
        b = timed_bare(x)
        w, c = timed_watched(x)
    assert not c.observed
    differences.append(w - b)
    bares.append(b)
counted, n = watched.counted, 5000
t = time.perf_counter()
for _ in range(n):  # the count's own work in a steady step of one micro-batch, the forward's end hook too
    counted.forward_begins(model, (x,), {})
    counted.forward_ends()
    counted.backward_begins(False)
    counted.backward_ends()
    counted.total()
calls = (time.perf_counter() - t) / n
x = ids(4)
times = []
for _ in range(2000):
    t = time.perf_counter()
    flops.describe(torch, (x,), {})
    times.append(time.perf_counter() - t)
print(json.dumps({
    "steady_added": statistics.median(differences), "bare_step": statistics.median(bares),
    "first": first, "later": later, "steady_at_2": steady_at_2,
    "describe": statistics.median(times), "flops": first_counted.flops, "calls": calls,
}))
"""


def bench_flops() -> tuple[str, list[tuple[str, str]]]:
    from pathlib import Path

    tests = str(Path(__file__).resolve().parents[1] / "tests")
    rows = []
    for name, pairs in (("gpt-tiny", 200), ("gpt-125m", 10)):
        argv = [sys.executable, "-c", CHILD, name, tests, str(pairs)]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=1800)
        if done.returncode != 0:
            rows.append((name, f"failed: {done.stderr.strip().splitlines()[-1:]}"))
            continue
        got = json.loads(done.stdout.strip().splitlines()[-1])
        share = got["steady_added"] / got["bare_step"] * 100
        rows += [
            (f"{name}: a bare step (median of {pairs})", f"{got['bare_step'] * 1000:.1f} ms"),
            (
                f"{name}: the count's own calls in a steady step (one micro-batch)",
                f"{got['calls'] * 1e6:.1f} us ({got['calls'] / got['bare_step'] * 100:.3f}%)",
            ),
            (
                f"{name}: a steady step's added cost (median of {pairs} pairs' differences)",
                f"{got['steady_added'] * 1e6:+.0f} us ({share:+.2f}%)",
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
