"""The transformer workload: a decoder-only GPT, and token data it can learn.

The model is a sequence of layers, like the MLP's, so every mode places, stages or shards it the
same way: layer 0 embeds the tokens, layers 1..L are blocks, the last is the head. Its shapes are
engine/planning/shapes.py's (GPT-2's block; an untied head), and its parameter count is what that
module computes, which the planner's predictions rely on.

Attention uses separate Q, K and V projections, so tensor parallelism can split them by columns
and every rank keeps whole heads (the Megatron pattern); each block finds its number of local
heads from the width of what its projections give it.

The data: each sequence follows a fixed random successor table (token t is followed by
succ[t]) three times in four, and a random token otherwise, so the next token is learnable and
the loss falls. Batch s is made from (seed, s) alone: every rank and mode sees the same one.
"""

from __future__ import annotations

from collections import OrderedDict

import torch
import torch.nn.functional as F
from torch import nn

from mgpu_tui.engine.planning.shapes import ModelShape

FOLLOW = 0.75  # how often a token is followed by its successor


class Embedding(nn.Module):
    def __init__(self, shape: ModelShape) -> None:
        super().__init__()
        self.tokens = nn.Embedding(shape.vocab, shape.d_model)
        self.positions = nn.Embedding(shape.seq_len, shape.d_model)
        # GPT-2's initialisation. torch's own, N(0, 1), made a tied head's first logits about
        # sqrt(d_model) wide: gpt-1.3b began at a loss near 1,200 where log(vocab) is 10.8.
        for table in (self.tokens, self.positions):
            nn.init.normal_(table.weight, std=0.02)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        where = torch.arange(ids.shape[-1], device=ids.device)
        return self.tokens(ids) + self.positions(where)


class Attention(nn.Module):
    def __init__(self, shape: ModelShape) -> None:
        super().__init__()
        d = shape.d_model
        self.head_dim = d // shape.heads
        self.q, self.k, self.v, self.proj = (nn.Linear(d, d) for _ in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, _ = x.shape

        def heads(t: torch.Tensor) -> torch.Tensor:  # (batch, local heads, seq, head_dim)
            return t.view(batch, seq, -1, self.head_dim).transpose(1, 2)

        q, k, v = heads(self.q(x)), heads(self.k(x)), heads(self.v(x))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(batch, seq, -1))


class Mlp(nn.Module):
    def __init__(self, shape: ModelShape) -> None:
        super().__init__()
        self.fc1 = nn.Linear(shape.d_model, shape.d_ff)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(shape.d_ff, shape.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


class GptBlock(nn.Module):
    # Tensor parallelism in the Megatron pattern: the sublayers to split, and how.
    tp_plan = {
        "attn.q": "colwise",
        "attn.k": "colwise",
        "attn.v": "colwise",
        "attn.proj": "rowwise",
        "mlp.fc1": "colwise",
        "mlp.fc2": "rowwise",
    }
    tp_whole = ("ln1", "ln2")  # the sublayers every rank keeps whole

    def __init__(self, shape: ModelShape) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(shape.d_model)
        self.attn = Attention(shape)
        self.ln2 = nn.LayerNorm(shape.d_model)
        self.mlp = Mlp(shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class Head(nn.Module):
    def __init__(self, shape: ModelShape) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(shape.d_model)
        self.out = nn.Linear(shape.d_model, shape.vocab, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.ln(x))


def build_gpt(shape: ModelShape) -> nn.Sequential:
    """Layer 0: the embeddings; 1..L: the blocks; L + 1: the head (the caller seeds the weights).
    A tied head's matrix is the token embeddings' (GPT-2's weight tying)."""
    embedding, head = Embedding(shape), Head(shape)
    if shape.tied_head:
        head.out.weight = embedding.tokens.weight
    layers = [embedding, *(GptBlock(shape) for _ in range(shape.layers)), head]
    return nn.Sequential(OrderedDict((str(i), layer) for i, layer in enumerate(layers)))


class TokenData:
    """Learnable token sequences: (inputs, next tokens), each (batch, seq_len), from (seed, step)."""

    def __init__(self, shape: ModelShape, seed: int) -> None:
        self.shape = shape
        self.seed = seed
        self.successor = torch.randperm(shape.vocab, generator=torch.Generator().manual_seed(seed + 1))

    def batch(self, step: int, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        rng = torch.Generator().manual_seed(self.seed * 1_000_003 + step)
        length, vocab = self.shape.seq_len + 1, self.shape.vocab
        random = torch.randint(vocab, (batch_size, length), generator=rng)
        follow = torch.rand(batch_size, length, generator=rng) < FOLLOW
        # Each token follows its predecessor where `follow` says so, else it is the random one: a
        # token is its run's first (random) token moved on by the successor once per step since. By
        # runs, not token by token: a step's batch in a few vectorised passes (the longest run's
        # length, about 10 at FOLLOW 0.75) where a loop over the sequence cost more than the GPU's
        # step on gpt-125m.
        positions = torch.arange(length).expand(batch_size, length)
        starts = torch.where(follow, 0, positions)
        starts[:, 0] = 0  # the first token is always the random one
        starts = starts.cummax(dim=1).values
        moves = positions - starts
        tokens = random.gather(1, starts)
        for n in range(1, int(moves.max()) + 1):
            tokens = torch.where(moves >= n, self.successor[tokens], tokens)
        return tokens[:, :-1], tokens[:, 1:]
