"""Where a step of the GPT demo goes on a GPU (scripts/gpu_check.py's gpt13b-profile check).

    python3 scripts/gpu_profile_gpt.py --model gpt-1.3b --batch 8 --out profile.txt [--compile]

The demo's model (demos/transformer.py) in bf16 autocast with the demo's SGD, on cuda:0: its step
timed with CUDA events; its FLOPs counted by torch's counter on one eager step, beside the analytic
count compare uses; a torch.profiler table of two steps (the kernels by GPU time, and their shares
by kind: matrix multiplies, attention, the rest). With --compile, each block is compiled
(``nn.Module.compile``, as torchtitan does: one graph for the identical blocks) and timed again.
The last line printed is the summary.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from mgpu_tui.demos.transformer import build_gpt
from mgpu_tui.engine.planning.shapes import model_shape
from mgpu_tui.engine.rank.watch.flops import register_missing_formulas

PEAK = 989.5e12  # the H200 SXM's dense bf16 (engine/machine/peaks.py)


DEVICE = "cuda" if torch.cuda.is_available() else "cpu"  # the CPU: a dry run of this script (gpt-tiny)


def sync() -> None:
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def step(model, optimizer, x, y):
    with torch.autocast(DEVICE, dtype=torch.bfloat16):
        logits = model(x)
        loss = F.cross_entropy(logits.flatten(0, 1).float(), y.flatten())
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss


def timed(model, optimizer, x, y, steps: int) -> float:
    for _ in range(3):
        step(model, optimizer, x, y)
    sync()
    started = time.perf_counter()
    for _ in range(steps):
        step(model, optimizer, x, y)
    sync()
    return (time.perf_counter() - started) / steps


def kind(name: str) -> str:
    lowered = name.lower()
    if any(k in lowered for k in ("gemm", "cutlass", "sm90_xmma", "nvjet", "cublas", "matmul")):
        return "matmul"
    if any(k in lowered for k in ("flash", "fmha", "attention", "efficient")):
        return "attention"
    return "other"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="gpt-1.3b")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--compile", action="store_true")
    args = parser.parse_args()
    shape = model_shape(args.model)
    torch.manual_seed(0)
    model = build_gpt(shape).to(DEVICE)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9)
    x = torch.randint(0, shape.vocab, (args.batch, shape.seq_len), device=DEVICE)
    y = torch.randint(0, shape.vocab, (args.batch, shape.seq_len), device=DEVICE)
    where = torch.cuda.get_device_name(0) if DEVICE == "cuda" else "cpu"
    lines = [f"{args.model} batch {args.batch} x {shape.seq_len} tokens, bf16 autocast, SGD, {where}"]

    register_missing_formulas(torch)  # the CPU's fused attention (a dry run here)
    with FlopCounterMode(display=False) as counter:
        step(model, optimizer, x, y)
    counted = counter.get_total_flops()
    analytic = shape.flops_per_token * shape.seq_len * args.batch
    lines.append(
        f"FLOPs a step: torch's counter {counted:.4e}, analytic (compare) {analytic:.4e}, "
        f"analytic/counter {analytic / counted:.4f}"
    )

    eager_s = timed(model, optimizer, x, y, args.steps)
    lines.append(
        f"eager: {eager_s * 1000:.1f} ms a step, {counted / eager_s / 1e12:.1f} TFLOP/s, "
        f"MFU {counted / eager_s / PEAK * 100:.1f}%"
    )

    from torch.profiler import ProfilerActivity, profile

    activity = ProfilerActivity.CUDA if DEVICE == "cuda" else ProfilerActivity.CPU
    with profile(activities=[activity]) as prof:
        for _ in range(2):
            step(model, optimizer, x, y)
        sync()
    averages = prof.key_averages()
    time_of = "self_device_time_total" if DEVICE == "cuda" else "self_cpu_time_total"
    kernels = [e for e in averages if getattr(e, time_of, 0) > 0]
    total = sum(getattr(e, time_of) for e in kernels) or 1
    shares: dict[str, float] = {}
    for e in kernels:
        shares[kind(e.key)] = shares.get(kind(e.key), 0) + getattr(e, time_of)
    by_kind = "device time by kind: " + ", ".join(
        f"{k} {v / total * 100:.1f}%" for k, v in sorted(shares.items(), key=lambda kv: -kv[1])
    )
    lines.append(by_kind)
    lines.append(f"device busy {total / 2 / 1000:.1f} ms of each step's {eager_s * 1000:.1f} ms")
    sort = "self_cuda_time_total" if DEVICE == "cuda" else "self_cpu_time_total"
    lines.append(averages.table(sort_by=sort, row_limit=18, max_name_column_width=70))

    summary = f"eager MFU {counted / eager_s / PEAK * 100:.1f}% ({eager_s * 1000:.0f} ms)"
    if args.compile:
        started = time.monotonic()
        for block in list(model)[1:-1]:
            block.compile()
        compiled_s = timed(model, optimizer, x, y, args.steps)
        lines.append(
            f"each block compiled (first steps {time.monotonic() - started:.0f} s with the compile): "
            f"{compiled_s * 1000:.1f} ms a step, MFU {counted / compiled_s / PEAK * 100:.1f}%"
        )
        summary += (
            f"; blocks compiled MFU {counted / compiled_s / PEAK * 100:.1f}% ({compiled_s * 1000:.0f} ms)"
        )
    peak = torch.cuda.max_memory_allocated() / 2**30 if DEVICE == "cuda" else 0.0
    summary += f"; counter/analytic {counted / analytic:.4f}; peak {peak:.1f} GiB; {by_kind}"
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines[:4]))
    print(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
