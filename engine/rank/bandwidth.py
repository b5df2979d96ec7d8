"""Bandwidth on the ranks of ``mgpu-tui --check``, as nccl-tests reports it: all_reduce's time,
algbw and busbw for one size and for a sweep of sizes, and the GPU-to-GPU copy matrix. Each
returns a task result for check_tasks.py: status, detail and metrics."""

from __future__ import annotations

import time

import torch
import torch.distributed as dist

SWEEP_BYTES = [2**k for k in range(3, 29)]  # 8 B .. 256 MiB, as nccl-tests -b 8 -e 256M -f 2


def sync(device: torch.device) -> None:
    """Wait for the GPU, so a timer reads its work (a no-op on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_all_reduce(nbytes: int, world: int, device: torch.device, min_seconds: float) -> dict:
    """Mean seconds per all_reduce of ``nbytes`` (float32), the slowest rank's, and the bandwidths.

    nccl-tests' definitions: algbw = bytes / time; all_reduce busbw = algbw x 2(n-1)/n,
    the traffic each link carries in a ring, comparable across rank counts.
    """
    count = max(1, nbytes // 4)
    buf = torch.ones(count, dtype=torch.float32, device=device)
    for _ in range(2):  # warm-up: first calls set up buffers and connections
        dist.all_reduce(buf)
    sync(device)
    # Agree on an iteration count from one timed call, so every rank runs the same number.
    dist.barrier()
    start = time.perf_counter()
    dist.all_reduce(buf)
    sync(device)
    probe = torch.tensor([time.perf_counter() - start], dtype=torch.float64, device=device)
    dist.all_reduce(probe, op=dist.ReduceOp.MAX)
    iterations = int(min(1000, max(3, min_seconds / max(probe.item(), 1e-6))))
    dist.barrier()
    start = time.perf_counter()
    for _ in range(iterations):
        dist.all_reduce(buf)
    sync(device)
    elapsed = torch.tensor([time.perf_counter() - start], dtype=torch.float64, device=device)
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
    seconds = elapsed.item() / iterations
    size = count * 4
    algbw = size / seconds / 1e9
    return {
        "size_bytes": size,
        "count": count,
        "type": "float32",
        "time_us": seconds * 1e6,
        "algbw_GBps": algbw,
        "busbw_GBps": algbw * 2 * (world - 1) / world,
        "iterations": iterations,
    }


def check_bandwidth(nbytes: int, world: int, device: torch.device) -> dict:
    m = time_all_reduce(nbytes, world, device, min_seconds=0.3)
    m["backend"] = dist.get_backend()
    detail = (
        f"all_reduce of {nbytes / 2**20:g} MiB: {m['time_us'] / 1000:.2f} ms, "
        f"algbw {m['algbw_GBps']:.2f} GB/s, busbw {m['busbw_GBps']:.2f} GB/s"
    )
    if device.type == "cuda" and m["backend"] == "gloo":
        detail += " (gloo through host memory: ranks share a GPU; no GPU link is measured)"
    return {"status": "pass", "detail": detail, "metrics": m}


def check_sweep(world: int, device: torch.device) -> dict:
    points = [time_all_reduce(n, world, device, min_seconds=0.05) for n in SWEEP_BYTES]
    best = max(points, key=lambda p: p["busbw_GBps"])
    detail = (
        f"{len(points)} sizes from 8 B to 256 MiB; peak busbw {best['busbw_GBps']:.2f} GB/s "
        f"at {best['size_bytes']} B"
    )
    return {"status": "pass", "detail": detail, "metrics": {"points": points}}


def check_copy_matrix(device: torch.device) -> dict:
    """GPU-to-GPU copy bandwidth, every ordered pair, measured from this process (rank 0)."""
    n = torch.cuda.device_count()
    if device.type != "cuda" or n < 2:
        return {"status": "skip", "detail": f"needs two GPUs; {n} visible", "metrics": {}}
    nbytes = 256 * 2**20
    matrix: list[list[float | None]] = [[None] * n for _ in range(n)]
    for i in range(n):
        src = torch.empty(nbytes, dtype=torch.uint8, device=f"cuda:{i}")
        for j in range(n):
            if i == j:
                continue
            dst = torch.empty(nbytes, dtype=torch.uint8, device=f"cuda:{j}")
            dst.copy_(src)  # warm-up: enables peer access where the driver allows it
            torch.cuda.synchronize(i)
            torch.cuda.synchronize(j)
            start = time.perf_counter()
            for _ in range(5):
                dst.copy_(src)
            torch.cuda.synchronize(i)
            torch.cuda.synchronize(j)
            matrix[i][j] = nbytes * 5 / (time.perf_counter() - start) / 1e9
            del dst
    pairs = [v for row in matrix for v in row if v is not None]
    detail = f"{n} GPUs, 256 MiB copies: {min(pairs):.1f} to {max(pairs):.1f} GB/s"
    return {"status": "pass", "detail": detail, "metrics": {"matrix_GBps": matrix}}
