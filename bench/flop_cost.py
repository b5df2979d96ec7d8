"""What counting a step's FLOPs costs a rank (bench/run.py's ``flops``; issue 42).

In a fresh process each (the first count imports torch's fake tensors and FLOP counter): a model
built by the GPT demo (demos/transformer.py) at gpt-tiny's shape and at GPT-2 small's (gpt-125m:
12 blocks, width 768, 1,024 tokens), on the CPU. Timed: the first count (a replay on fake tensors:
forward and backward, engine/rank/watch/flop_count.py), a count of a new shape after it (what every later
shape costs), and ``describe`` (run at every training forward of the root: the inputs reduced to a
key). Goals: a count < 100 ms once per shape (the first may add the imports), describe < 20 us.
"""

from __future__ import annotations

import json
import subprocess
import sys

CHILD = """
import json, statistics, sys, time
import torch
from mgpu_tui.demos.transformer import build_gpt
from mgpu_tui.engine.planning.shapes import model_shape
from mgpu_tui.engine.rank.watch import flop_count
shape = model_shape(sys.argv[1])
model = build_gpt(shape)
def call(batch):
    return flop_count.describe(torch, (torch.randint(0, shape.vocab, (batch, shape.seq_len)),), {})
started = time.perf_counter()
flops = flop_count.count(torch, model, call(8))
first = time.perf_counter() - started
started = time.perf_counter()
flop_count.count(torch, model, call(4))
again = time.perf_counter() - started
ids = torch.randint(0, shape.vocab, (8, shape.seq_len))
times = []
for _ in range(2000):
    t = time.perf_counter()
    flop_count.describe(torch, (ids,), {})
    times.append(time.perf_counter() - t)
print(json.dumps({"first": first, "again": again, "describe": statistics.median(times), "flops": flops}))
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
            (f"{name}: the first count (its imports included)", f"{got['first'] * 1000:.0f} ms"),
            (f"{name}: a new shape's count after it", f"{got['again'] * 1000:.0f} ms"),
            (f"{name}: describe, at each training forward", f"{got['describe'] * 1e6:.1f} us"),
            (f"{name}: FLOPs of a step of 8 sequences", f"{got['flops']:.3e}"),
        ]
    return "flops: counting a step's FLOPs (goals: a count < 100 ms a shape, describe < 20 us)", rows
