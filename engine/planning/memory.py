"""The memory each device of each mode needs to train a transformer, before anything runs.

For every mode, each device's bytes split into parameters, gradients, optimizer state,
activations and buffers, and whether the largest fits the GPU. The state (parameters,
gradients, optimizer) is counted tensor by tensor as the mode places or shards it, so on the
CPU it is what the ranks really hold; activations are an estimate:

- per block, Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer
  Models", eq. 2 and 3): s b h (34 + 5 a s / h) bytes with 16-bit activations, and with tensor
  parallelism over t ranks (without sequence parallelism) s b h (10 + 24 / t + 5 a s / (h t)).
  The 5 a s / h term is the attention scores and their softmax, s x s a head; the GPT blocks
  compute attention with scaled_dot_product_attention, whose fused kernels (flash, memory-efficient)
  never keep that matrix, so it is left out: s b h 34 and s b h (10 + 24 / t), as the paper's
  selective recomputation gives. Without --amp the values are float32: twice that;
- the output layer: the float32 logits and their gradient, 8 s b V bytes, where the head is;
  the embeddings' output, 4 s b h bytes, where the embeddings are.

Buffers are what a mode adds on top: DDP's gradient buckets (a second copy of the gradients,
unless gradient_as_bucket_view), FSDP's gathered block and its unsharded gradients.
Parameters and gradients are float32 (autocast computes in 16 bits but keeps float32 weights);
SGD with momentum keeps one float32 buffer a parameter, Adam two plus a float32 `step` a tensor.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from mgpu_tui.engine.planning.modes import MODES
from mgpu_tui.engine.planning.placement import PlacementError, split_layers
from mgpu_tui.engine.planning.shapes import MlpShape, ModelShape

FLOAT32 = 4
OPTIMIZERS = ("sgd", "adam")
# The modes a plan covers, in the catalogue's order (the user's own script has no shape to plan).
PLANNED_MODES = ("single", "dp", "ddp", "mp", "ddp_mp", "pipeline", "fsdp", "rpc", "tp", "hybrid")


@dataclass(frozen=True)
class Training:
    optimizer: str = "sgd"
    amp: bool = False
    batch_size: int = 8  # the global batch, in sequences
    microbatches: int = 4  # pipeline
    schedule: str = "gpipe"  # pipeline: gpipe or 1f1b


@dataclass(frozen=True)
class DeviceMemory:
    device: str  # "rank 0", "GPU 1", "host"
    params: int
    grads: int
    optimizer: int
    activations: int
    buffers: int = 0
    gpu: bool = True  # host memory (hybrid's embedding) is not checked against the GPU

    @property
    def state(self) -> int:
        """Parameters, gradients and optimizer state: what a rank holds from one step to the next."""
        return self.params + self.grads + self.optimizer

    @property
    def total(self) -> int:
        return self.state + self.activations + self.buffers

    def to_json(self) -> dict:
        return {
            "device": self.device,
            "params": self.params,
            "grads": self.grads,
            "optimizer": self.optimizer,
            "activations": self.activations,
            "buffers": self.buffers,
            "state": self.state,
            "total": self.total,
            "gpu": self.gpu,
        }


@dataclass(frozen=True)
class ModePlan:
    mode: str
    gpus: int  # GPUs the mode uses here
    devices: tuple[DeviceMemory, ...] = ()
    note: str | None = None  # why it cannot be planned, or what the figures assume
    fits: bool | None = None  # None: no GPU memory to compare with, or no plan

    @property
    def peak(self) -> int | None:
        totals = [d.total for d in self.devices if d.gpu]
        return max(totals) if totals else None

    def to_json(self) -> dict:
        return {
            "mode": self.mode,
            "gpus": self.gpus,
            "fits": self.fits,
            "peak_bytes": self.peak,
            "note": self.note,
            "devices": [d.to_json() for d in self.devices],
        }


# ---- the model, layer by layer, tensor by tensor -------------------------------------------


@dataclass(frozen=True)
class Tensor:
    numel: int
    rows: int  # dim 0: what FSDP shards (torch.chunk over the ranks)
    tp: str | None = None  # under tensor parallelism: "rows" split (column-wise), "cols" (row-wise)

    def under_tp(self, t: int) -> Tensor:
        if t == 1 or self.tp is None:
            return self
        if self.tp == "rows":
            return Tensor(self.numel // t, self.rows // t)
        return Tensor(self.numel // t, self.rows)


@dataclass(frozen=True)
class Layer:
    """One of the model's layers, the unit modes place, stage or shard (demos/harness.n_layers)."""

    kind: str  # "embedding", "block", "head"
    tensors: tuple[Tensor, ...]


def _linear(n_in: int, n_out: int, tp: str | None = None, bias: bool = True) -> list[Tensor]:
    """A Linear layer's weight (out x in) and bias; column-wise TP splits both, row-wise the weight."""
    weight = Tensor(n_in * n_out, n_out, tp)
    if not bias:
        return [weight]
    return [weight, Tensor(n_out, n_out, "rows" if tp == "rows" else None)]


def _norm(d: int) -> list[Tensor]:
    return [Tensor(d, d), Tensor(d, d)]


def layers_of(model: ModelShape | MlpShape) -> list[Layer]:
    """The layers in demos/harness.build_model's order, with their tensors in parameters() order."""
    if isinstance(model, MlpShape):
        w = model.width
        block = Layer("block", tuple(_linear(w, 2 * w, "rows") + _linear(2 * w, w, "cols")))
        return [block] * model.depth + [Layer("head", tuple(_linear(w, model.classes)))]
    d, f = model.d_model, model.d_ff
    tokens, positions = Tensor(model.vocab * d, model.vocab), Tensor(model.seq_len * d, model.seq_len)
    attention = _linear(d, d, "rows") + _linear(d, d, "rows") + _linear(d, d, "rows") + _linear(d, d, "cols")
    mlp = _linear(d, f, "rows") + _linear(f, d, "cols")
    block = Layer("block", tuple(_norm(d) + attention + _norm(d) + mlp))
    embedding = Layer("embedding", (tokens, positions))
    head = Layer("head", tuple(_norm(d) + _linear(d, model.vocab, bias=False)))
    return [embedding] + [block] * model.layers + [head]


@dataclass(frozen=True)
class Part:
    """Some of the model's tensors, as a rank or device holds them."""

    tensors: tuple[Tensor, ...]

    @property
    def numel(self) -> int:
        return sum(t.numel for t in self.tensors)


def _part(layers: list[Layer], tp: int = 1) -> Part:
    return Part(tuple(t.under_tp(tp) for layer in layers for t in layer.tensors))


def _shard(part: Part, rank: int, world: int) -> Part:
    """FSDP2's shard of each tensor: dim 0 cut as torch.chunk cuts it (ceil(rows / world) rows a
    rank, the last ranks taking fewer or none)."""
    out = []
    for t in part.tensors:
        chunk = -(-t.rows // world)
        rows = max(0, min(chunk, t.rows - rank * chunk))
        out.append(Tensor(t.numel // t.rows * rows, rows))
    return Part(tuple(out))


def state_bytes(part: Part, training: Training) -> tuple[int, int, int]:
    """(parameters, gradients, optimizer state) in bytes for the tensors a rank holds."""
    numel = part.numel
    if training.optimizer == "adam":  # exp_avg, exp_avg_sq, and a float32 step per tensor
        optimizer = 2 * FLOAT32 * numel + FLOAT32 * len(part.tensors)
    else:  # SGD's momentum buffer
        optimizer = FLOAT32 * numel
    return FLOAT32 * numel, FLOAT32 * numel, optimizer


# ---- activations -------------------------------------------------------------------------


def _activations(
    model: ModelShape | MlpShape, training: Training, layers: list[Layer], sequences: float, tp: int = 1
) -> int:
    """The activations the layers keep for backward, for ``sequences`` samples at once."""
    blocks = sum(1 for layer in layers if layer.kind == "block")
    if isinstance(model, MlpShape):  # per sample: a block's input, fc1's output and GELU's; the logits
        w = model.width
        per_sample = blocks * 5 * w + (2 * model.classes if layers and layers[-1].kind == "head" else 0)
        return int(FLOAT32 * per_sample * sequences)
    s, h, v = model.seq_len, model.d_model, model.vocab
    per_block = s * sequences * h * (34 if tp == 1 else 10 + 24 / tp)
    total = blocks * per_block * (1 if training.amp else 2)
    if any(layer.kind == "embedding" for layer in layers):
        total += FLOAT32 * s * sequences * h
    if any(layer.kind == "head" for layer in layers):
        total += 2 * FLOAT32 * s * sequences * v
    return int(total)


# ---- the modes ---------------------------------------------------------------------------


def _device(
    name: str, part: Part, training: Training, activations: int, buffers: int = 0, gpu: bool = True
) -> DeviceMemory:
    return DeviceMemory(name, *state_bytes(part, training), activations, buffers, gpu)


def _stages(
    model, training: Training, parts: int, sequences: float, in_flight=None, label: str = "rank"
) -> list[DeviceMemory]:
    """The layers cut into ``parts`` contiguous stages as the demos cut them (the embeddings are the
    first layer, the head the last); ``in_flight(i)``: the samples whose activations stage i holds."""
    layers = layers_of(model)
    out = []
    for i, where in enumerate(split_layers(len(layers), parts)):
        mine = layers[where.start : where.stop]
        held = in_flight(i) if in_flight else sequences
        out.append(_device(f"{label} {i}", _part(mine), training, _activations(model, training, mine, held)))
    return out


def plan_mode(
    mode: str, model: ModelShape | MlpShape, gpus: int, training: Training, stages: int | None = None
) -> ModePlan:
    """Each device's memory for ``mode`` on ``gpus`` GPUs (or CPU ranks); ``stages``: mp's (default
    ``gpus``)."""
    B = training.batch_size  # noqa: N806 (the global batch, as in the papers)
    layers = layers_of(model)
    whole = _part(layers)
    try:
        if mode == "single":
            return ModePlan(
                mode, 1, (_device("GPU 0", whole, training, _activations(model, training, layers, B)),)
            )
        if mode == "dp":  # replicas on every GPU; GPU 0 keeps the gradients summed and the optimizer
            per = B / gpus
            outputs = _activations(model, training, layers[-1:], B) if gpus > 1 else 0  # gathered on GPU 0
            zero = DeviceMemory(
                "GPU 0", *state_bytes(whole, training), _activations(model, training, layers, per) + outputs
            )
            params, grads, _ = state_bytes(whole, training)
            replica = DeviceMemory("GPU 1..", params, grads, 0, _activations(model, training, layers, per))
            return ModePlan(mode, gpus, (zero, replica) if gpus > 1 else (zero,))
        if mode == "ddp":
            activations = _activations(model, training, layers, B / gpus)
            buckets = FLOAT32 * whole.numel  # DDP's gradient buckets: a second copy of the gradients
            return ModePlan(
                mode,
                gpus,
                tuple(_device(f"rank {r}", whole, training, activations, buckets) for r in range(gpus)),
            )
        if mode == "fsdp":
            activations = _activations(model, training, layers, B / gpus)
            # The units FSDP gathers one at a time: each layer (the root holds nothing of its own).
            gathered = 2 * FLOAT32 * max(_part([layer]).numel for layer in layers)
            ranks = [
                _device(f"rank {r}", _shard(whole, r, gpus), training, activations, gathered)
                for r in range(gpus)
            ]
            return ModePlan(mode, gpus, tuple(ranks))
        if mode == "tp":
            widths = (model.heads, model.d_ff) if isinstance(model, ModelShape) else (2 * model.width,)
            if any(w % gpus for w in widths):
                return ModePlan(
                    mode,
                    gpus,
                    note=f"tensor parallelism over {gpus} ranks needs the heads and "
                    f"the MLP width divisible by {gpus}.",
                )
            part = _part(layers, tp=gpus)
            activations = _activations(model, training, layers, B, tp=gpus)
            return ModePlan(
                mode, gpus, tuple(_device(f"rank {r}", part, training, activations) for r in range(gpus))
            )
        if mode == "pipeline":
            m = training.microbatches
            if training.schedule == "1f1b":  # stage i holds at most (stages - i) micro-batches at once

                def held(i):
                    return min(gpus - i, m) * B / m
            else:  # GPipe: every micro-batch's activations, until backward

                def held(i):
                    return B

            return ModePlan(mode, gpus, tuple(_stages(model, training, gpus, B, held)))
        if mode == "rpc":  # the trainer (rank 0) holds the first layers, the others later runs
            return ModePlan(mode, gpus, tuple(_stages(model, training, gpus, B)))
        if mode == "mp":
            n = stages or gpus
            return ModePlan(mode, n, tuple(_stages(model, training, n, B, label="GPU")))
        if mode == "ddp_mp":
            pairs = gpus // 2
            if pairs < 1:
                return ModePlan(mode, gpus, note="ddp over model-parallel ranks needs two GPUs a rank.")
            halves = _stages(model, training, 2, B / pairs, label="GPU")
            devices = [
                DeviceMemory(f"rank {r} {h.device}", h.params, h.grads, h.optimizer, h.activations, h.grads)
                for r in range(pairs)
                for h in halves
            ]
            return ModePlan(mode, pairs * 2, tuple(devices))
        if mode == "hybrid":  # the first layer (the embeddings) in host memory, the rest on GPU 0
            host, rest = layers[:1], layers[1:]
            return ModePlan(
                mode,
                1,
                (
                    _device("host", _part(host), training, _activations(model, training, host, B), gpu=False),
                    _device("GPU 0", _part(rest), training, _activations(model, training, rest, B)),
                ),
            )
    except PlacementError:
        return ModePlan(mode, gpus, note=f"{len(layers)} layers cannot be cut into {gpus} stages.")
    raise ValueError(f"no plan for mode {mode!r}")


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
    devices = 2 * world if mode == "ddp_mp" else world
    ranks: dict[int, tuple[int, int]] = {}
    for device in plan_mode(mode, model, devices, training, stages).devices:
        if device.device == "GPU 1..":
            continue
        rank = int(device.device.split()[1]) if device.device.startswith("rank ") else 0
        state, total = ranks.get(rank, (0, 0))
        ranks[rank] = (state + device.state, total + device.total)
    return ranks
