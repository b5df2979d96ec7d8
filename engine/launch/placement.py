"""Which devices each rank uses, and which layers each stage holds: pure functions.

Both the engine (to refuse a launch that needs more GPUs than there are) and the
demos (to place their layers) use these, so the two can never disagree. Standard
library only: rank code imports this without paying for anything.

Device names are torch's: "cpu", "cuda:0", ... Indices count the GPUs this
process can see, so CUDA_VISIBLE_DEVICES is respected by construction.
"""

from __future__ import annotations


class PlacementError(ValueError):
    """The mode cannot be placed on the GPUs there are."""


# Modes with one device per rank: rank r uses the GPU of its local rank.
_ONE_PER_RANK = {"ddp", "pipeline", "fsdp", "rpc", "tp"}


def gpus_needed(mode: str, nproc: int, stages: int = 2) -> int:
    """GPUs a launch of ``mode`` with ``nproc`` ranks per node needs on this node."""
    if mode in _ONE_PER_RANK:
        return nproc
    if mode == "ddp_mp":
        return 2 * nproc
    if mode == "mp":
        return stages
    return 1  # single, dp (at least one), hybrid


def shares_gpus(mode: str, nproc: int, gpu_count: int, stages: int = 2) -> bool:
    """Whether ``nproc`` ranks of ``mode`` need more GPUs than there are, so some share one.

    Only with --share-gpus; NCCL refuses two ranks on one device, so such ranks talk over gloo.
    """
    return gpus_needed(mode, nproc, stages) > gpu_count


def rank_devices(
    mode: str,
    local_rank: int,
    gpu_count: int,
    *,
    nproc: int = 1,
    stages: int = 2,
    device: str = "cuda",
    share: bool = False,
) -> list[str]:
    """The devices one rank places its model on, in model order.

    - ddp, pipeline, fsdp, rpc, tp: ``cuda:<local rank>``.
    - ddp_mp: rank r spans ``cuda:2r`` and ``cuda:2r+1``.
    - mp: stage s on ``cuda:s``, for ``stages`` stages.
    - dp: every visible GPU (DataParallel replicates over them all).
    - hybrid: the CPU first, then ``cuda:0``.
    - single: ``cuda:0``.

    With ``device="cpu"`` every entry is "cpu" (the same structure, on the host).
    With ``share``, GPU indices wrap round-robin over the ``gpu_count`` there are
    (ranks 0 and 1 both on cuda:0 on a one-GPU machine), so a job for a big box
    can be rehearsed on a small one.
    Raises PlacementError, with one sentence, when there are too few GPUs.
    """
    if device == "cuda":
        needed = gpus_needed(mode, nproc, stages)
        if gpu_count < 1 or (gpu_count < needed and not share):
            raise PlacementError(
                f"mode {mode!r} with {nproc} rank(s) needs {max(needed, 1)} GPU(s), "
                f"but {gpu_count} are visible."
            )
    if mode in _ONE_PER_RANK:
        names = [f"cuda:{local_rank}"]
    elif mode == "ddp_mp":
        names = [f"cuda:{2 * local_rank}", f"cuda:{2 * local_rank + 1}"]
    elif mode == "mp":
        names = [f"cuda:{s}" for s in range(stages)]
    elif mode == "dp":
        names = [f"cuda:{i}" for i in range(max(gpu_count, 1))]
    elif mode == "hybrid":
        names = ["cpu", "cuda:0"]
    else:
        names = ["cuda:0"]
    if device == "cpu":
        return ["cpu"] * len(names)
    if share:
        names = [f"cuda:{int(n.partition(':')[2]) % gpu_count}" if n.startswith("cuda:") else n
                 for n in names]  # fmt: skip
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
