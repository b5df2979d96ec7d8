"""The memory each device of each mode needs to train a transformer, before anything runs.

For every mode, each device's bytes split into parameters, gradients, optimizer state,
activations, buffers and (under --amp) autocast's copies, and whether the largest fits the GPU.
The state (parameters, gradients, optimizer) is counted tensor by tensor as the mode places or
shards it, so on the CPU it is what the ranks really hold; activations are an estimate:

- per block, Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer
  Models", eq. 2 and 3): s b h (34 + 5 a s / h) bytes with 16-bit activations, and with tensor
  parallelism over t ranks (without sequence parallelism) s b h (10 + 24 / t + 5 a s / (h t)).
  The 5 a s / h term is the attention scores and their softmax, s x s a head; the GPT blocks
  compute attention with scaled_dot_product_attention, whose fused kernels (flash, memory-efficient)
  never keep that matrix, so it is left out: s b h 34 and s b h (10 + 24 / t), as the paper's
  selective recomputation gives. Without --amp the values are float32: twice that;
- the output layer: the float32 log-probabilities cross-entropy keeps, and as backward begins the
  gradients of them and of the logits, 12 s b V bytes, where the head is; the embeddings' output,
  4 s b h bytes, where the embeddings are.

Each figure holds at a named moment (MOMENTS): the state at rest, after the optimizer step; the
total at the peak, the largest of: as backward begins (every activation held, the loss's gradients
made, no parameter's gradient yet: the demos' zero_grad sets them to None), in an FSDP unit's
backward (the unit gathered, its unsharded gradients and their reduce-scatter copy), or as
backward ends (every gradient made, the activations freed), which wins when the state outweighs
the activations.

Buffers are what a mode adds on top: DDP's gradient buckets (a second copy of the gradients,
unless gradient_as_bucket_view; they stay between steps), FSDP's gathered unit and its unsharded
gradients, and without resharding after forward every unit's parameters whole from forward to
backward (both only at the peak). Parameters and gradients are float32: autocast computes in 16
bits but keeps float32 weights, which are their own master copy (byte_split); the 16-bit copy of
each weight a matmul reads is kept for backward (2 bytes a weight, whole under FSDP, which casts
the gathered weight). SGD with momentum keeps one float32 buffer a parameter, Adam two plus a
float32 `step` a tensor.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from mgpu_tui.engine.planning.memory_figures import (
    FLOAT32,
    MOMENTS,
    OPTIMIZERS,
    DeviceMemory,
    ModePlan,
    Training,
    byte_split,
)
from mgpu_tui.engine.planning.memory_layers import (
    Held,
    Layer,
    device_memory,
    held_by,
    layers_of,
    part_of,
    shard_of,
    stages_of,
    state_bytes,
    zero_partition,
)
from mgpu_tui.engine.planning.modes import MODES, MemoryShape
from mgpu_tui.engine.planning.placement import PlacementError
from mgpu_tui.engine.planning.shapes import MlpShape, ModelShape

__all__ = [
    "MOMENTS",
    "OPTIMIZERS",
    "PLANNED_MODES",
    "DeviceMemory",
    "ModePlan",
    "Training",
    "byte_split",
    "fit",
    "layers_of",
    "needed",
    "plan",
    "plan_mode",
    "plan_run",
    "predicted_per_rank",
    "tied_apart",
]

# The modes a plan covers, in the catalogue's order (the user's own script has no shape to plan).
PLANNED_MODES = tuple(MODES)


@dataclass(frozen=True)
class Planned:
    """What a planner is given: the mode, the model, its layers, the devices and the training."""

    mode: str
    model: ModelShape | MlpShape
    layers: list[Layer]
    gpus: int
    training: Training
    stages: int | None  # mp's (default: gpus)

    @property
    def batch(self) -> int:
        return self.training.batch_size  # the global batch, in sequences

    def held(self, layers: list[Layer], sequences: float, tp: int = 1) -> Held:
        return held_by(self.model, self.training, layers, sequences, tp)


def _one_device(p: Planned) -> ModePlan:
    whole = part_of(p.layers)
    return ModePlan(p.mode, 1, (device_memory("GPU 0", whole, p.training, p.held(p.layers, p.batch)),))


def _replicas_gathered(p: Planned) -> ModePlan:
    """DataParallel: replicas on every GPU; GPU 0 keeps the gradients summed and the optimizer, and
    the outputs gathered there, where the loss is computed."""
    whole, per = part_of(p.layers), p.batch / p.gpus
    outputs = p.held(p.layers[-1:], p.batch) if p.gpus > 1 else Held(0)
    zero = device_memory("GPU 0", whole, p.training, p.held(p.layers, per) + outputs)
    replica = dataclasses.replace(
        device_memory("GPU 1..", whole, p.training, p.held(p.layers, per)), optimizer=0
    )
    return ModePlan(p.mode, p.gpus, (zero, replica) if p.gpus > 1 else (zero,))


def _replicated(p: Planned) -> ModePlan:
    whole = part_of(p.layers)
    activations = p.held(p.layers, p.batch / p.gpus)
    buckets = FLOAT32 * whole.numel  # DDP's gradient buckets: a second copy of the gradients
    ranks = [
        device_memory(f"rank {r}", whole, p.training, activations, buckets, resident=True)
        for r in range(p.gpus)
    ]
    return ModePlan(p.mode, p.gpus, tuple(ranks))


def _optimizer_sharded(p: Planned) -> ModePlan:
    """ZeroRedundancyOptimizer: DDP's, each rank keeping its partition's optimizer state."""
    replicated = _replicated(p)
    shares = zero_partition(part_of(p.layers), p.gpus)
    ranks = [
        dataclasses.replace(d, optimizer=state_bytes(shares[r], p.training)[2])
        for r, d in enumerate(replicated.devices)
    ]
    return dataclasses.replace(replicated, devices=tuple(ranks))


def _sharded(p: Planned, *, kept_whole: bool = False) -> ModePlan:
    """FSDP2 as the demo shards it: each block its own unit (each layer, the embeddings and the head
    too, unless the head is tied: then the root unit holds both, gathered at the first forward and
    kept until backward ends). One unit gathered at a time; ``kept_whole``
    (reshard_after_forward=False): every unit stays whole from its forward to its backward, so
    as backward begins the whole model is gathered. In a unit's backward, its unsharded gradients
    and the reduce-scatter's copy of them besides."""
    layers, model = p.layers, p.model
    whole = part_of(layers)
    tied = isinstance(model, ModelShape) and model.tied_head
    units = [layer for layer in layers if layer.kind == "block" or not tied]
    root = FLOAT32 * part_of([layer for layer in layers if tied and layer.kind != "block"]).numel
    largest = FLOAT32 * max(part_of([u]).numel for u in units)
    kept = FLOAT32 * whole.numel if kept_whole else root  # whole from forward to backward
    # A unit's backward: its parameters gathered (unless kept), their unsharded gradients, and the
    # reduce-scatter's copy of those.
    gathered = kept + (2 * largest if kept_whole else 3 * largest)
    activations = p.held(layers, p.batch / p.gpus)
    ranks = [
        device_memory(
            f"rank {r}",
            shard_of(whole, r, p.gpus),
            p.training,
            activations,
            gathered,
            kept=kept,
            copies=whole,
        )
        for r in range(p.gpus)
    ]
    return ModePlan(p.mode, p.gpus, tuple(ranks))


def _tensor_split(p: Planned) -> ModePlan:
    model, gpus = p.model, p.gpus
    widths = (model.heads, model.d_ff) if isinstance(model, ModelShape) else (2 * model.width,)
    if any(w % gpus for w in widths):
        note = f"tensor parallelism over {gpus} ranks needs the heads and the MLP width divisible by {gpus}."
        return ModePlan(p.mode, gpus, note=note)
    part = part_of(p.layers, tp=gpus)
    activations = p.held(p.layers, p.batch, tp=gpus)
    return ModePlan(
        p.mode, gpus, tuple(device_memory(f"rank {r}", part, p.training, activations) for r in range(gpus))
    )


def _pipelined(p: Planned) -> ModePlan:
    m, gpus, batch = p.training.microbatches, p.gpus, p.batch
    if p.training.schedule == "1f1b":  # stage i holds at most (stages - i) micro-batches at once

        def held(i):
            return min(gpus - i, m) * batch / m
    else:  # GPipe: every micro-batch's activations, until backward

        def held(i):
            return batch

    return ModePlan(p.mode, gpus, tuple(stages_of(p.model, p.training, gpus, batch, held)))


def _staged(p: Planned) -> ModePlan:
    """rpc: the trainer (rank 0) holds the first layers, the others later ones."""
    return ModePlan(p.mode, p.gpus, tuple(stages_of(p.model, p.training, p.gpus, p.batch)))


def _stages_in_process(p: Planned) -> ModePlan:
    n = p.stages or p.gpus
    return ModePlan(p.mode, n, tuple(stages_of(p.model, p.training, n, p.batch, label="GPU")))


def _stage_pairs(p: Planned) -> ModePlan:
    pairs = p.gpus // 2
    if pairs < 1:
        return ModePlan(p.mode, p.gpus, note="ddp over model-parallel ranks needs two GPUs a rank.")
    halves = stages_of(p.model, p.training, 2, p.batch / pairs, label="GPU")
    devices = [  # each half's gradient buckets: DDP's second copy of its gradients
        dataclasses.replace(h, device=f"rank {r} {h.device}", buffers=h.grads, resident=True)
        for r in range(pairs)
        for h in halves
    ]
    return ModePlan(p.mode, pairs * 2, tuple(devices))


def _host_first_layer(p: Planned) -> ModePlan:
    """hybrid: the first layer (the embeddings) in host memory, the rest on GPU 0."""
    host, rest = p.layers[:1], p.layers[1:]
    return ModePlan(
        p.mode,
        1,
        (
            device_memory("host", part_of(host), p.training, p.held(host, p.batch), gpu=False),
            device_memory("GPU 0", part_of(rest), p.training, p.held(rest, p.batch)),
        ),
    )


# One planner for each way a mode holds memory (the catalogue's Mode.memory).
PLANNERS: dict[MemoryShape, Callable[[Planned], ModePlan]] = {
    "one_device": _one_device,
    "replicas_gathered": _replicas_gathered,
    "replicated": _replicated,
    "optimizer_sharded": _optimizer_sharded,
    "sharded": _sharded,
    "sharded_kept": lambda p: _sharded(p, kept_whole=True),
    "tensor_split": _tensor_split,
    "pipelined": _pipelined,
    "staged": _staged,
    "stages_in_process": _stages_in_process,
    "stage_pairs": _stage_pairs,
    "host_first_layer": _host_first_layer,
}


def plan_mode(
    mode: str, model: ModelShape | MlpShape, gpus: int, training: Training, stages: int | None = None
) -> ModePlan:
    """Each device's memory for ``mode`` on ``gpus`` GPUs (or CPU ranks); ``stages``: mp's (default
    ``gpus``)."""
    shape = MODES[mode].memory
    if shape is None:
        raise ValueError(f"no plan for mode {mode!r}")
    layers = layers_of(model)
    if MODES[mode].layers_apart and isinstance(model, ModelShape) and model.tied_head:
        return ModePlan(mode, gpus, note=tied_apart(mode, model))
    try:
        return PLANNERS[shape](Planned(mode, model, layers, gpus, training, stages))
    except PlacementError:
        return ModePlan(mode, gpus, note=f"{len(layers)} layers cannot be cut into {gpus} stages.")


def tied_apart(mode: str, model: ModelShape) -> str:
    """Why a staged mode cannot train a model whose head is tied to its embeddings: one sentence."""
    return (
        f"{model.name} ties its head to the token embeddings, and {mode} puts them on different "
        "stages: add --untied-head."
    )


def plan(shape: ModelShape, gpus: int, training: Training, gpu_mem_bytes: int | None) -> list[ModePlan]:
    """Every mode's plan on ``gpus`` GPUs, each marked as fitting ``gpu_mem_bytes`` or not."""
    return [fit(plan_mode(mode, shape, gpus, training), gpu_mem_bytes) for mode in PLANNED_MODES]


def needed(p: ModePlan, *, shared: bool = False) -> int | None:
    """The bytes ``p`` needs of one memory: its fullest GPU, or (``shared``: CPU ranks, which all
    live in the host's memory) every device together."""
    if not p.devices:
        return None
    return sum(d.total for d in p.devices) if shared else p.peak


def fit(p: ModePlan, limit: int | None, *, shared: bool = False) -> ModePlan:
    """``p`` marked as fitting ``limit`` bytes or not (unmarked without a limit or a plan)."""
    need = needed(p, shared=shared)
    return p if need is None or limit is None else dataclasses.replace(p, fits=need <= limit)


def plan_run(
    mode: str,
    model: ModelShape | MlpShape,
    nproc: int,
    training: Training,
    *,
    stages: int = 2,
    gpu_count: int = 0,
) -> ModePlan:
    """The plan of ``mode`` as mgpu-tui launches it with ``nproc`` ranks (one-process modes: one):
    a GPU a rank, two for ddp_mp, ``stages`` for mp, every visible one for dp."""
    spec = MODES[mode]
    if spec.layout == "every_gpu":
        devices = max(1, gpu_count)
    else:
        devices = spec.gpus_needed(nproc if spec.multi_process else 1, stages)
    return plan_mode(mode, model, devices, training, stages)


def predicted_per_rank(
    mode: str, model: ModelShape | MlpShape, world: int, training: Training, stages: int | None = None
) -> dict[int, tuple[int, int]]:
    """Rank -> (state bytes, total bytes) that the planner predicts for a run of ``mode`` over
    ``world`` ranks. One process's devices add up (single, dp, mp, hybrid: rank 0; ddp_mp: a rank's
    two GPUs); dp's replicas are left out: copies, made and dropped each step."""
    devices = MODES[mode].devices_per_rank * world
    ranks: dict[int, tuple[int, int]] = {}
    for device in plan_mode(mode, model, devices, training, stages).devices:
        if device.device == "GPU 1..":
            continue
        rank = int(device.device.split()[1]) if device.device.startswith("rank ") else 0
        state, total = ranks.get(rank, (0, 0))
        ranks[rank] = (state + device.state, total + device.total)
    return ranks
