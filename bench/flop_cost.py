"""What counting a step's FLOPs costs a rank (bench/run.py's ``flops``; issue 42).

In a fresh process each (the first count imports torch's fake tensors and FLOP counter): a model
built by the GPT demo (demos/transformer.py) at gpt-tiny's shape and at GPT-2 small's (gpt-125m:
12 blocks, width 768, 1,024 tokens), on the CPU, counted as a rank counts (engine/rank/watch/flops/
StepFlops). Timed: the first count (forward and backward replayed on fake tensors and on meta
tensors, to see whether the two agree), a count of a new shape after it (what every later shape
costs: on meta tensors where they agreed), a new shape on fake tensors alone for comparison, and
``describe`` (run at every training forward of the root: the inputs reduced to a key). Goals: a
count < 100 ms once per shape (the first may add the imports), describe < 20 us.
"""

from __future__ import annotations

import json
import subprocess
import sys

CHILD = """
import contextlib, json, statistics, sys, time
import torch
from mgpu_tui.demos.transformer import build_gpt
from mgpu_tui.engine.planning.shapes import model_shape
from mgpu_tui.engine.rank.watch import flops
shape = model_shape(sys.argv[1])
model = build_gpt(shape)
counted = flops.StepFlops(torch)
def step(batch):
    counted.seen(model, (torch.randint(0, shape.vocab, (batch, shape.seq_len)),), {})
    started = time.perf_counter()
    total = counted.total(contextlib.nullcontext)
    return time.perf_counter() - started, total
first, total = step(8)
again, _ = step(4)
call = flops.describe(torch, (torch.randint(0, shape.vocab, (2, shape.seq_len)),), {})
started = time.perf_counter()
flops.count(torch, model, call)
fake = time.perf_counter() - started
ids = torch.randint(0, shape.vocab, (8, shape.seq_len))
times = []
for _ in range(2000):
    t = time.perf_counter()
    flops.describe(torch, (ids,), {})
    times.append(time.perf_counter() - t)
print(json.dumps({"first": first, "again": again, "fake": fake, "on_meta": counted.on_meta,
                  "describe": statistics.median(times), "flops": total}))
"""


def bench_flops() -> tuple[str, list[tuple[str, str]]]:
    rows = []
    for name in ("gpt-tiny", "gpt-125m"):
        argv = [sys.executable, "-c", CHILD, name]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            rows.append((name, f"failed: {done.stderr.strip().splitlines()[-1:]}"))
            continue
        got = json.loads(done.stdout.strip().splitlines()[-1])
        rows += [
            (
                f"{name}: the first count (both replays, their imports included)",
                f"{got['first'] * 1000:.0f} ms",
            ),
            (
                f"{name}: a new shape's count after it ({'meta' if got['on_meta'] else 'fake'} tensors)",
                f"{got['again'] * 1000:.0f} ms",
            ),
            (f"{name}: a new shape on fake tensors alone, for comparison", f"{got['fake'] * 1000:.0f} ms"),
            (f"{name}: describe, at each training forward", f"{got['describe'] * 1e6:.1f} us"),
            (f"{name}: FLOPs of a step of 8 sequences", f"{got['flops']:.3e}"),
        ]
    return "flops: counting a step's FLOPs (goals: a count < 100 ms a shape, describe < 20 us)", rows
