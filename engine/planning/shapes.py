"""The transformer shapes mgpu-tui plans for: a decoder-only GPT family with named sizes, and one's
own shape. Pure arithmetic: the parameters, their tensors, and the training FLOPs per token.

The block is GPT-2's: LayerNorm, causal self-attention (Q, K, V and output projections, with
biases), LayerNorm, an MLP of ``d_ff`` (4 x d_model) with GELU; learned token and position
embeddings; a final LayerNorm and an output head without bias. GPT-2 and GPT-3 tie the head to the
token embeddings (one matrix, used twice), and so do their sizes here; a tied head cannot sit on
another pipeline stage than the embeddings, so the modes that cut the model into stages need
``--untied-head`` (a head of its own, as gpt-tiny and Llama's gpt-7b have). Q, K and V apart, so
that tensor parallelism can split each by columns and keep whole heads on every rank.
demos/transformer.py builds exactly this model.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

# The fields a GPT's shape can be given by (--layers --d-model --heads --seq-len --vocab), and what each is.
SHAPE_FIELDS = {
    "layers": "blocks",
    "d_model": "width",
    "heads": "attention heads",
    "seq_len": "tokens a sequence",
    "vocab": "vocabulary",
}


# What the demos and the check's ranks take beside the fields: --untied-head (1: a head of its own).
SHAPE_OPTIONS = (*SHAPE_FIELDS, "untied_head")
UNTIED_HELP = "give the head a matrix of its own where the size ties it to the embeddings"


def add_shape_options(parser) -> None:
    """The shape's flags on a rank's parser (the demos', the check's), as the launch passes them."""
    for field in SHAPE_FIELDS:
        parser.add_argument(f"--{field.replace('_', '-')}", type=int, help=f"the GPT's {SHAPE_FIELDS[field]}")
    parser.add_argument("--untied-head", type=int, nargs="?", const=1, help=UNTIED_HELP)


class ShapeError(ValueError):
    """A shape that cannot be: one sentence for the user."""


@dataclass(frozen=True)
class ModelShape:
    name: str
    layers: int
    d_model: int
    heads: int
    seq_len: int
    vocab: int
    d_ff: int = 0  # 0: 4 x d_model
    tied_head: bool = False  # the head's matrix is the token embeddings' (GPT-2, GPT-3)

    def __post_init__(self) -> None:
        for field in SHAPE_FIELDS:
            if (value := getattr(self, field)) < 1:
                raise ShapeError(f"--{field.replace('_', '-')} must be at least 1, got {value}.")
        if self.d_model % self.heads:
            raise ShapeError(f"--d-model ({self.d_model}) must be a multiple of --heads ({self.heads}).")
        if self.d_ff == 0:
            object.__setattr__(self, "d_ff", 4 * self.d_model)

    # ---- parameters -------------------------------------------------------------------

    @property
    def block_params(self) -> int:
        """One block: LN (2d), Q, K, V (3d^2 + 3d), out proj (d^2 + d), LN (2d), MLP (2 d d_ff + d_ff + d)."""
        d, f = self.d_model, self.d_ff
        return 2 * d + (3 * d * d + 3 * d) + (d * d + d) + 2 * d + (d * f + f) + (f * d + d)

    @property
    def embedding_params(self) -> int:
        """Token and position embeddings."""
        return self.vocab * self.d_model + self.seq_len * self.d_model

    @property
    def head_params(self) -> int:
        """The final LayerNorm and the output head (no bias; nothing more when tied)."""
        return 2 * self.d_model + (0 if self.tied_head else self.d_model * self.vocab)

    @property
    def params(self) -> int:
        return self.embedding_params + self.layers * self.block_params + self.head_params

    # Parameter tensors (the count matters for the optimizer's per-tensor state, Adam's `step`).
    BLOCK_TENSORS = 16  # ln1 w b, q w b, k w b, v w b, proj w b, ln2 w b, fc1 w b, fc2 w b
    EMBEDDING_TENSORS = 2  # token, position
    HEAD_TENSORS = 3  # final ln w b, head w (a tied head has no weight of its own)

    @property
    def tensors(self) -> int:
        head = self.HEAD_TENSORS - (1 if self.tied_head else 0)
        return self.EMBEDDING_TENSORS + self.layers * self.BLOCK_TENSORS + head

    # ---- compute ----------------------------------------------------------------------

    @property
    def matmul_params(self) -> int:
        """The weights that multiply a matrix: each block's Q, K, V, output and MLP matrices, and the
        head's (a tied head's too: the embeddings' matrix is multiplied there). Embedding lookups,
        biases and LayerNorms do no matrix multiply."""
        d, f = self.d_model, self.d_ff
        return self.layers * (4 * d * d + 2 * d * f) + d * self.vocab

    @property
    def flops_per_token(self) -> int:
        """Training FLOPs per token, as torch's FLOP counter counts them (torch.utils.flop_counter;
        docs/compare.md): 6 a weight of the matrix multiplies (2 forward, 2 for the input's gradient,
        2 for the weight's), and attention's 14 d s a layer: 4 forward (QK^T and AV over the whole
        sequence, the causal mask not discounted) and 10 backward (the scores recomputed, then four
        products). PaLM's 6N + 12 L d s (Chowdhery et al. 2022, appendix B), which counted every
        parameter and attention's backward at twice its forward, was 2% under the counter on
        gpt-1.3b and 20% under it on gpt-tiny."""
        return 6 * self.matmul_params + 14 * self.layers * self.d_model * self.seq_len

    def to_json(self) -> dict:
        return {**asdict(self), "params": self.params, "flops_per_token": self.flops_per_token}


@dataclass(frozen=True)
class MlpShape:
    """The demos' quickest model: ``depth`` residual blocks (width -> 2 width -> width) and a
    10-class head (demos/harness.py)."""

    width: int
    depth: int
    classes: int = 10
    name: str = "mlp"

    @property
    def params(self) -> int:
        w = self.width
        return self.depth * (w * 2 * w + 2 * w + 2 * w * w + w) + w * self.classes + self.classes

    @property
    def flops_per_sample(self) -> int:
        """Training FLOPs for one sample, as torch's FLOP counter counts them: 2 a weight forward, 2
        for the weight's gradient, and 2 for the input's gradient except at the first layer (its
        input, the data, needs none)."""
        w = self.width
        weights = self.depth * (w * 2 * w + 2 * w * w) + w * self.classes
        return 6 * weights - 2 * (w * 2 * w)


# The named sizes. gpt-tiny runs in seconds on 2 CPU ranks (the tests' size); 125m/350m/1.3b are
# GPT-2 small, GPT-2 medium and GPT-3 XL's shapes with their tied heads (Radford et al. 2019: 124M
# and 355M; Brown et al. 2020, table 2.1); gpt-7b has Llama-2-7B's layers, width, heads, context
# and vocabulary (Touvron et al. 2023) with this family's GELU MLP, which gives the same 6.7 billion
# parameters within 1%.
MODELS = {
    m.name: m
    for m in (
        ModelShape("gpt-tiny", layers=2, d_model=64, heads=4, seq_len=32, vocab=256),
        ModelShape("gpt-125m", layers=12, d_model=768, heads=12, seq_len=1024, vocab=50257, tied_head=True),
        ModelShape("gpt-350m", layers=24, d_model=1024, heads=16, seq_len=1024, vocab=50257, tied_head=True),
        ModelShape("gpt-1.3b", layers=24, d_model=2048, heads=16, seq_len=2048, vocab=50257, tied_head=True),
        ModelShape("gpt-7b", layers=32, d_model=4096, heads=32, seq_len=4096, vocab=32000),
    )
}


def model_shape(name: str, **overrides: int | None) -> ModelShape:
    """A named size, with any of layers, d_model, heads, seq_len, vocab changed (None: kept), and
    ``untied_head=1``: a head of its own where the size ties it.

    ``name`` may also be "custom" (untied): then every field must be given."""
    untied = bool(overrides.pop("untied_head", None))
    given = {k: v for k, v in overrides.items() if v is not None}
    if name == "custom":
        missing = [k for k in SHAPE_FIELDS if k not in given]
        if missing:
            flags = ", ".join(f"--{k.replace('_', '-')}" for k in missing)
            raise ShapeError(f"a custom model needs {flags}.")
        return ModelShape("custom", **given)  # type: ignore[arg-type]  # the int fields, checked above
    if name not in MODELS:
        raise ShapeError(f"unknown model {name!r}; choose one of {', '.join(MODELS)}, or custom.")
    base = MODELS[name]
    if not given:
        return replace(base, tied_head=False) if untied else base
    fields = {**asdict(base), **given, "d_ff": 0 if "d_model" in given else base.d_ff}
    fields["name"] = f"{name} (changed)"
    fields["tied_head"] = base.tied_head and not untied
    return ModelShape(**fields)
