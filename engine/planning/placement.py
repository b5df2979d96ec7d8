"""Which devices each rank uses, and which layers each stage holds: pure functions.

Both the engine (to refuse a launch that needs more GPUs than there are) and the
demos (to place their layers) use these, so the two can never disagree. Standard
library only: rank code imports this without paying for anything.

Device names are torch's: "cpu", "cuda:0", ... Indices count the GPUs this
process can see, so CUDA_VISIBLE_DEVICES is respected by construction.
"""

from __future__ import annotations

from typing import Literal


class PlacementError(ValueError):
    """The mode cannot be placed on the GPUs there are."""


# How a mode lays its ranks (or its one process's stages) out on GPUs; the catalogue
# (modes.py) gives each mode one.
Layout = Literal["one_per_rank", "two_per_rank", "stages", "every_gpu", "cpu_then_gpu", "one_gpu"]


def gpus_needed(layout: Layout, nproc: int, stages: int = 2) -> int:
    """GPUs a launch with ``nproc`` ranks per node needs on this node."""
    if layout == "one_per_rank":
        return nproc
    if layout == "two_per_rank":
        return 2 * nproc
    if layout == "stages":
        return stages
    return 1  # one_gpu, every_gpu (at least one), cpu_then_gpu


def shares_gpus(layout: Layout, nproc: int, gpu_count: int, stages: int = 2) -> bool:
    """Whether ``nproc`` ranks need more GPUs than there are, so some share one.

    Only with --share-gpus; NCCL refuses two ranks on one GPU, so such ranks talk over gloo.
    """
    return gpus_needed(layout, nproc, stages) > gpu_count


def rank_devices(
    layout: Layout,
    local_rank: int,
    gpu_count: int,
    *,
    nproc: int = 1,
    stages: int = 2,
    device: str = "cuda",
    share: bool = False,
) -> list[str]:
    """The devices one rank places its model on, in model order.

    - one_per_rank (ddp, pipeline, fsdp, rpc, tp): ``cuda:<local rank>``.
    - two_per_rank (ddp_mp): rank r spans ``cuda:2r`` and ``cuda:2r+1``.
    - stages (mp): stage s on ``cuda:s``, for ``stages`` stages.
    - every_gpu (dp): every visible GPU (DataParallel replicates over them all).
    - cpu_then_gpu (hybrid): the CPU first, then ``cuda:0``.
    - one_gpu (single): ``cuda:0``.

    With ``device="cpu"`` every entry is "cpu" (the same structure, on the host).
    With ``share``, GPU indices wrap round-robin over the ``gpu_count`` there are
    (ranks 0 and 1 both on cuda:0 on a one-GPU machine), so a job for a big box
    can be rehearsed on a small one.
    Raises PlacementError, with one sentence, when there are too few GPUs.
    """
    if device == "cuda":
        needed = gpus_needed(layout, nproc, stages)
        if gpu_count < 1 or (gpu_count < needed and not share):
            raise PlacementError(
                f"{nproc} rank(s) here: this launch needs {max(needed, 1)} GPU(s), "
                f"but {gpu_count} are visible."
            )
    if layout == "one_per_rank":
        names = [f"cuda:{local_rank}"]
    elif layout == "two_per_rank":
        names = [f"cuda:{2 * local_rank}", f"cuda:{2 * local_rank + 1}"]
    elif layout == "stages":
        names = [f"cuda:{s}" for s in range(stages)]
    elif layout == "every_gpu":
        names = [f"cuda:{i}" for i in range(max(gpu_count, 1))]
    elif layout == "cpu_then_gpu":
        names = ["cpu", "cuda:0"]
    else:
        names = ["cuda:0"]
    if device == "cpu":
        return ["cpu"] * len(names)
    if share:
        names = [
            f"cuda:{int(n.partition(':')[2]) % gpu_count}" if n.startswith("cuda:") else n for n in names
        ]
    return names


def split_layers(n_layers: int, parts: int) -> list[range]:
    """Contiguous, balanced ranges of layer indices, one per part (earlier parts take the extras)."""
    if not 1 <= parts <= n_layers:
        raise PlacementError(f"cannot split {n_layers} layers into {parts} stages.")
    base, extra = divmod(n_layers, parts)
    ranges, start = [], 0
    for p in range(parts):
        size = base + (1 if p < extra else 0)
        ranges.append(range(start, start + size))
        start += size
    return ranges
