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
from dataclasses import dataclass

from mgpu_tui.engine.planning.modes import MODES
from mgpu_tui.engine.planning.placement import PlacementError, split_layers
from mgpu_tui.engine.planning.shapes import MlpShape, ModelShape

FLOAT32 = 4
HALF = 2  # autocast's float16 or bfloat16
OPTIMIZERS = ("sgd", "adam")
# The modes a plan covers, in the catalogue's order (the user's own script has no shape to plan).
PLANNED_MODES = tuple(MODES)
# The moments the figures hold at (a plan's JSON carries them).
MOMENTS = {
    "at_rest": "after the optimizer step, until the next step's zero_grad: parameters, gradients, "
    "optimizer state and the buffers that stay (DDP's buckets)",
    "backward_begins": "the loss computed and its gradients made, every activation still held, no "
    "parameter's gradient yet (zero_grad set them to None), the buffers of the moment gathered",
    "unit_backward": "FSDP gathers a unit for its backward: its parameters, their unsharded gradients "
    "and the reduce-scatter's copy of them, while the logits' gradient is still held",
    "backward_ends": "every gradient made and the activations freed: the at-rest figure",
}


@dataclass(frozen=True)
class Training:
    optimizer: str = "sgd"
    amp: bool = False
    batch_size: int = 8  # the global batch, in sequences
    microbatches: int = 4  # pipeline
    schedule: str = "gpipe"  # pipeline: gpipe or 1f1b
    accum: int = 1  # micro-batches a step outside the pipeline: their gradients add up before backward ends


def byte_split(training: Training) -> dict[str, int]:
    """Bytes a parameter in torch's terms for ``training``: float32 weights (their own master copy
    under autocast), float32 gradients, the optimizer's buffers, and autocast's 16-bit copy of a
    matmul's weight, held from its forward to its backward."""
    return {
        "weights": FLOAT32,
        "gradients": FLOAT32,
        "optimizer": 2 * FLOAT32 if training.optimizer == "adam" else FLOAT32,
        "master_weights": 0,
        "amp_copy": HALF if training.amp else 0,
    }


@dataclass(frozen=True)
class DeviceMemory:
    device: str  # "rank 0", "GPU 1", "host"
    params: int
    grads: int
    optimizer: int
    activations: int
    buffers: int = 0
    gpu: bool = True  # host memory (hybrid's embedding) is not checked against the GPU
    amp_copies: int = 0  # autocast's 16-bit copies of the matmuls' weights, kept for backward
    loss_grads: int = 0  # as backward begins: the gradients of the loss's input (where the head is)
    resident: bool = False  # the buffers stay between steps (DDP's buckets); else only at the peak
    kept: int = 0  # of the buffers, what is held from forward to backward (resident ones: all)
    grads_at_peak: bool = False  # accumulation: the earlier micro-batches' gradients are held

    @property
    def state(self) -> int:
        """Parameters, gradients and optimizer state: what a rank holds from one step to the next."""
        return self.params + self.grads + self.optimizer

    @property
    def at_rest(self) -> int:
        """What the device holds after the optimizer step: the state and the buffers that stay."""
        return self.state + (self.buffers if self.resident else 0)

    @property
    def after_forward(self) -> int:
        """As the forward pass ends: no gradient yet (zero_grad set them to None; with accumulation,
        the earlier micro-batches'), every activation kept, the buffers kept until backward."""
        return self._during_step + self.activations + self._kept

    @property
    def backward_begins(self) -> int:
        """The loss's gradients made (of the log-probabilities and of the logits)."""
        return self.after_forward + self.loss_grads

    @property
    def unit_backward(self) -> int:
        """A unit's backward with all the buffers gathered, the logits' gradient still held."""
        return self._during_step + self.activations + self.loss_grads // 2 + self.buffers

    @property
    def _kept(self) -> int:
        return self.buffers if self.resident else self.kept

    @property
    def _during_step(self) -> int:
        held = self.grads if self.grads_at_peak else 0
        return self.params + held + self.optimizer + self.amp_copies

    @property
    def peak_moment(self) -> str:
        """When the device's peak comes (a key of MOMENTS)."""
        moments = {
            "backward_begins": self.backward_begins,
            "unit_backward": self.unit_backward,
            "backward_ends": self.at_rest,
        }
        return max(moments, key=moments.__getitem__)  # the first of equals

    @property
    def total(self) -> int:
        """The peak: the largest of the moments."""
        return max(self.backward_begins, self.unit_backward, self.at_rest)

    def to_json(self) -> dict:
        return {
            "device": self.device,
            "params": self.params,
            "grads": self.grads,
            "optimizer": self.optimizer,
            "activations": self.activations,
            "buffers": self.buffers,
            "amp_copies": self.amp_copies,
            "loss_grads": self.loss_grads,
            "state": self.state,
            "at_rest": self.at_rest,
            "after_forward": self.after_forward,
            "total": self.total,
            "peak_moment": self.peak_moment,
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
            "moments": MOMENTS,
        }


# ---- the model, layer by layer, tensor by tensor -------------------------------------------


@dataclass(frozen=True)
class Tensor:
    numel: int
    rows: int  # dim 0: what FSDP shards (torch.chunk over the ranks)
    tp: str | None = None  # under tensor parallelism: "rows" split (column-wise), "cols" (row-wise)
    matmul: bool = False  # a weight a matmul reads: autocast casts it, and backward keeps the copy

    def under_tp(self, t: int) -> Tensor:
        if t == 1 or self.tp is None:
            return self
        if self.tp == "rows":
            return Tensor(self.numel // t, self.rows // t, matmul=self.matmul)
        return Tensor(self.numel // t, self.rows, matmul=self.matmul)


@dataclass(frozen=True)
class Layer:
    """One of the model's layers, the unit modes place, stage or shard (demos/harness.n_layers)."""

    kind: str  # "embedding", "block", "head"
    tensors: tuple[Tensor, ...]


def _linear(n_in: int, n_out: int, tp: str | None = None, bias: bool = True) -> list[Tensor]:
    """A Linear layer's weight (out x in) and bias; column-wise TP splits both, row-wise the weight."""
    weight = Tensor(n_in * n_out, n_out, tp, matmul=True)
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
    # A tied head reads the token embeddings as its matmul's weight.
    tokens = Tensor(model.vocab * d, model.vocab, matmul=model.tied_head)
    positions = Tensor(model.seq_len * d, model.seq_len)
    attention = _linear(d, d, "rows") + _linear(d, d, "rows") + _linear(d, d, "rows") + _linear(d, d, "cols")
    mlp = _linear(d, f, "rows") + _linear(f, d, "cols")
    block = Layer("block", tuple(_norm(d) + attention + _norm(d) + mlp))
    embedding = Layer("embedding", (tokens, positions))
    head = Layer("head", tuple(_norm(d) + ([] if model.tied_head else _linear(d, model.vocab, bias=False))))
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
        out.append(Tensor(t.numel // t.rows * rows, rows, matmul=t.matmul))
    return Part(tuple(out))


def _zero_partition(part: Part, world: int) -> list[Part]:
    """ZeroRedundancyOptimizer's partition: the tensors largest first (a stable sort), each to the
    rank with the fewest elements so far (the first such rank), as torch's _partition_parameters
    does; each rank keeps the optimizer state of its own."""
    ranks: list[list[Tensor]] = [[] for _ in range(world)]
    sizes = [0] * world
    for t in sorted(part.tensors, key=lambda t: t.numel, reverse=True):
        rank = sizes.index(min(sizes))
        ranks[rank].append(t)
        sizes[rank] += t.numel
    return [Part(tuple(r)) for r in ranks]


def amp_copies(part: Part, training: Training) -> int:
    """Autocast's 16-bit copies of the matmul weights in ``part``, saved for backward."""
    return HALF * sum(t.numel for t in part.tensors if t.matmul) if training.amp else 0


def state_bytes(part: Part, training: Training) -> tuple[int, int, int]:
    """(parameters, gradients, optimizer state) in bytes for the tensors a rank holds."""
    numel = part.numel
    if training.optimizer == "adam":  # exp_avg, exp_avg_sq, and a float32 step per tensor
        optimizer = 2 * FLOAT32 * numel + FLOAT32 * len(part.tensors)
    else:  # SGD's momentum buffer
        optimizer = FLOAT32 * numel
    return FLOAT32 * numel, FLOAT32 * numel, optimizer


# ---- activations -------------------------------------------------------------------------


@dataclass(frozen=True)
class Held:
    """What a device holds for backward: the activations its layers keep, and (where the loss is
    computed) the gradients of the loss's input made as backward begins."""

    activations: int
    loss_grads: int = 0

    def __add__(self, other: Held) -> Held:
        return Held(self.activations + other.activations, self.loss_grads + other.loss_grads)


def _activations(
    model: ModelShape | MlpShape, training: Training, layers: list[Layer], sequences: float, tp: int = 1
) -> Held:
    """The activations the layers keep for backward, for ``sequences`` samples at once; where the
    head is, cross-entropy's float32 log-probabilities, and as backward begins the gradients of them
    and of the logits (two more of that size)."""
    blocks = sum(1 for layer in layers if layer.kind == "block")
    head = any(layer.kind == "head" for layer in layers)
    if isinstance(model, MlpShape):  # per sample: a block's input, fc1's output and GELU's; the logits
        w = model.width
        per_sample = blocks * 5 * w + (model.classes if head else 0)
        loss_grads = 2 * FLOAT32 * model.classes * sequences if head else 0
        return Held(int(FLOAT32 * per_sample * sequences), int(loss_grads))
    s, h, v = model.seq_len, model.d_model, model.vocab
    per_block = s * sequences * h * (34 if tp == 1 else 10 + 24 / tp)
    total = blocks * per_block * (1 if training.amp else 2)
    if any(layer.kind == "embedding" for layer in layers):
        total += FLOAT32 * s * sequences * h
    log_probs = FLOAT32 * s * sequences * v if head else 0
    return Held(int(total + log_probs), int(2 * log_probs))


# ---- the modes ---------------------------------------------------------------------------


def _device(
    name: str,
    part: Part,
    training: Training,
    held: Held,
    buffers: int = 0,
    gpu: bool = True,
    *,
    resident: bool = False,
    kept: int = 0,
    copies: Part | None = None,
) -> DeviceMemory:
    """``copies``: the weights autocast casts, when they are not ``part`` (FSDP casts whole ones)."""
    return DeviceMemory(
        name,
        *state_bytes(part, training),
        held.activations,
        buffers,
        gpu,
        loss_grads=held.loss_grads,
        amp_copies=amp_copies(copies or part, training),
        resident=resident,
        kept=kept,
        grads_at_peak=training.accum > 1,
    )


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
    if MODES[mode].layers_apart and isinstance(model, ModelShape) and model.tied_head:
        return ModePlan(mode, gpus, note=tied_apart(mode, model))
    try:
        if mode == "single":
            return ModePlan(
                mode, 1, (_device("GPU 0", whole, training, _activations(model, training, layers, B)),)
            )
        if mode == "dp":  # replicas on every GPU; GPU 0 keeps the gradients summed and the optimizer
            per = B / gpus
            # The outputs gathered on GPU 0, with the loss computed there.
            outputs = _activations(model, training, layers[-1:], B) if gpus > 1 else Held(0)
            zero = _device("GPU 0", whole, training, _activations(model, training, layers, per) + outputs)
            replica = dataclasses.replace(
                _device("GPU 1..", whole, training, _activations(model, training, layers, per)), optimizer=0
            )
            return ModePlan(mode, gpus, (zero, replica) if gpus > 1 else (zero,))
        if mode in ("ddp", "zero1"):
            activations = _activations(model, training, layers, B / gpus)
            buckets = FLOAT32 * whole.numel  # DDP's gradient buckets: a second copy of the gradients
            ranks = [
                _device(f"rank {r}", whole, training, activations, buckets, resident=True)
                for r in range(gpus)
            ]
            if mode == "zero1":  # ZeroRedundancyOptimizer: each rank keeps its partition's state
                shares = _zero_partition(whole, gpus)
                ranks = [
                    dataclasses.replace(d, optimizer=state_bytes(shares[r], training)[2])
                    for r, d in enumerate(ranks)
                ]
            return ModePlan(mode, gpus, tuple(ranks))
        if mode in ("fsdp", "fsdp_grad_op"):
            return _fsdp(mode, model, gpus, training)
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
            devices = [  # each half's gradient buckets: DDP's second copy of its gradients
                dataclasses.replace(h, device=f"rank {r} {h.device}", buffers=h.grads, resident=True)
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


def tied_apart(mode: str, model: ModelShape) -> str:
    """Why a staged mode cannot train a model whose head is tied to its embeddings: one sentence."""
    return (
        f"{model.name} ties its head to the token embeddings, and {mode} puts them on different "
        "stages: add --untied-head."
    )


def _fsdp(mode: str, model: ModelShape | MlpShape, gpus: int, training: Training) -> ModePlan:
    """FSDP2 as the demo shards it: each block its own unit (each layer, the embeddings and the head
    too, unless the head is tied: then the root unit holds both, gathered at the first forward and
    kept until backward ends). ``fsdp``: one unit gathered at a time; ``fsdp_grad_op``
    (reshard_after_forward=False): every unit stays whole from its forward to its backward, so
    as backward begins the whole model is gathered. In a unit's backward, its unsharded gradients
    and the reduce-scatter's copy of them besides."""
    layers = layers_of(model)
    whole = _part(layers)
    tied = isinstance(model, ModelShape) and model.tied_head
    units = [layer for layer in layers if layer.kind == "block" or not tied]
    root = FLOAT32 * _part([layer for layer in layers if tied and layer.kind != "block"]).numel
    largest = FLOAT32 * max(_part([u]).numel for u in units)
    kept = root if mode == "fsdp" else FLOAT32 * whole.numel  # whole from forward to backward
    # A unit's backward: its parameters gathered (unless kept), their unsharded gradients, and the
    # reduce-scatter's copy of those.
    gathered = kept + (3 * largest if mode == "fsdp" else 2 * largest)
    activations = _activations(model, training, layers, training.batch_size / gpus)
    ranks = [
        _device(f"rank {r}", _shard(whole, r, gpus), training, activations, gathered, kept=kept, copies=whole)
        for r in range(gpus)
    ]
    return ModePlan(mode, gpus, tuple(ranks))


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
