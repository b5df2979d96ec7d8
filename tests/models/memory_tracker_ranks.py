"""Torch's own memory trackers over the demos' GPT, for tests/models/test_memory_tracker.py.

Run by torchrun on 2 CPU ranks (gloo). For ddp (MemTracker) and fsdp (FSDPMemTracker), at each
batch size given, two training steps as the demos take them (zero_grad to None, forward, loss,
backward, SGD with momentum); the second step's figures by category at three moments (after
forward, after backward, after the optimizer step) and the peak of both steps. Rank 0 writes them
as JSON to the path given.
"""

from __future__ import annotations

import json
import sys

import torch
import torch.distributed as dist
from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
from torch.distributed._tools.mem_tracker import MemTracker
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.nn.parallel import DistributedDataParallel as DDP

from mgpu_tui.demos.model import loss as cross_entropy
from mgpu_tui.demos.transformer import TokenData, build_gpt
from mgpu_tui.engine.planning.shapes import ModelShape

# The custom GPT of about 21M parameters the planner is held to (docs/compare.md).
SHAPE = ModelShape("custom", layers=4, d_model=512, heads=8, seq_len=128, vocab=8192)


def categories(snapshot: dict) -> dict[str, int]:
    """One device's figures, by category name (Parameter, Gradient, Activation, ..., Total)."""
    (figures,) = snapshot.values()
    return {getattr(k, "value", k): int(v) for k, v in figures.items()}


def measure(mode: str, batch: int, rank: int, world: int) -> dict:
    torch.manual_seed(0)
    model = build_gpt(SHAPE)
    if mode == "ddp":
        wrapped = DDP(model)
    else:
        mesh = init_device_mesh("cpu", (world,))
        for layer in model:
            fully_shard(layer, mesh=mesh)
        wrapped = fully_shard(model, mesh=mesh)
    optimizer = torch.optim.SGD(wrapped.parameters(), lr=0.01, momentum=0.9)
    tracker = MemTracker() if mode == "ddp" else FSDPMemTracker(wrapped, optimizer)
    if mode == "ddp":
        tracker.track_external(wrapped, optimizer)
    data, local = TokenData(SHAPE, 0), batch // world
    moments: dict[str, dict[str, int]] = {}
    with tracker:
        for step in (1, 2):
            x, y = data.batch(step, batch)
            x, y = x[rank * local : (rank + 1) * local], y[rank * local : (rank + 1) * local]
            optimizer.zero_grad(set_to_none=True)
            logits = wrapped(x)
            moments["after_forward"] = categories(tracker.get_tracker_snapshot("current"))
            loss = cross_entropy(logits, y)
            del logits  # as in the demos: only cross-entropy's log-probabilities stay
            loss.backward()
            moments["after_backward"] = categories(tracker.get_tracker_snapshot("current"))
            optimizer.step()
            moments["after_step"] = categories(tracker.get_tracker_snapshot("current"))
            tracker.reset_mod_stats()
    return {"moments": moments, "peak": categories(tracker.get_tracker_snapshot("peak"))}


def main() -> None:
    out, batches = sys.argv[1], [int(b) for b in sys.argv[2:]]
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    results = {f"{mode} {b}": measure(mode, b, rank, world) for mode in ("ddp", "fsdp") for b in batches}
    if rank == 0:
        with open(out, "w") as f:
            json.dump(results, f, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
