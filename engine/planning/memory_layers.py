"""The model as modes place, shard and stage it: its layers tensor by tensor (as the demos build
them), what a rank's part holds (parameters, gradients, optimizer state, autocast's copies) and the
activations its layers keep for backward (the estimate memory.py's docstring explains)."""

from __future__ import annotations

from dataclasses import dataclass

from mgpu_tui.engine.planning.memory_figures import FLOAT32, HALF, DeviceMemory, Training
from mgpu_tui.engine.planning.placement import split_layers
from mgpu_tui.engine.planning.shapes import MlpShape, ModelShape

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


def part_of(layers: list[Layer], tp: int = 1) -> Part:
    return Part(tuple(t.under_tp(tp) for layer in layers for t in layer.tensors))


def shard_of(part: Part, rank: int, world: int) -> Part:
    """FSDP2's shard of each tensor: dim 0 cut as torch.chunk cuts it (ceil(rows / world) rows a
    rank, the last ranks taking fewer or none)."""
    out = []
    for t in part.tensors:
        chunk = -(-t.rows // world)
        rows = max(0, min(chunk, t.rows - rank * chunk))
        out.append(Tensor(t.numel // t.rows * rows, rows, matmul=t.matmul))
    return Part(tuple(out))


def zero_partition(part: Part, world: int) -> list[Part]:
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


def held_by(
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


# ---- what a device holds, a stage at a time ---------------------------------------------------


def device_memory(
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


def stages_of(
    model, training: Training, parts: int, sequences: float, in_flight=None, label: str = "rank"
) -> list[DeviceMemory]:
    """The layers cut into ``parts`` contiguous stages as the demos cut them (the embeddings are the
    first layer, the head the last); ``in_flight(i)``: the samples whose activations stage i holds."""
    layers = layers_of(model)
    out = []
    for i, where in enumerate(split_layers(len(layers), parts)):
        mine = layers[where.start : where.stop]
        held = in_flight(i) if in_flight else sequences
        out.append(
            device_memory(f"{label} {i}", part_of(mine), training, held_by(model, training, mine, held))
        )
    return out
