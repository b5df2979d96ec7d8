"""The GPT demos' data (demos/transformer.py TokenData): made by runs in a few vectorised passes, and
exactly the sequences the token-by-token definition gives (every mode and every recorded run trains
on the same data as before)."""

import pytest
import torch

from mgpu_tui.demos.transformer import FOLLOW, TokenData
from mgpu_tui.engine.planning.shapes import model_shape


def token_by_token(data: TokenData, step: int, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The definition: each token is its predecessor's successor where `follow`, else the random one."""
    rng = torch.Generator().manual_seed(data.seed * 1_000_003 + step)
    length, vocab = data.shape.seq_len + 1, data.shape.vocab
    random = torch.randint(vocab, (batch_size, length), generator=rng)
    follow = torch.rand(batch_size, length, generator=rng) < FOLLOW
    tokens = random.clone()
    for t in range(1, length):
        tokens[:, t] = torch.where(follow[:, t], data.successor[tokens[:, t - 1]], random[:, t])
    return tokens[:, :-1], tokens[:, 1:]


@pytest.mark.parametrize(
    ("model", "batch_size", "seed"), [("gpt-tiny", 4, 0), ("gpt-tiny", 7, 5), ("gpt-125m", 2, 1)]
)
def test_the_batches_are_the_definitions_sequences(model, batch_size, seed):
    data = TokenData(model_shape(model), seed)
    for step in (0, 1, 17):
        inputs, targets = data.batch(step, batch_size)
        expected_inputs, expected_targets = token_by_token(data, step, batch_size)
        assert torch.equal(inputs, expected_inputs) and torch.equal(targets, expected_targets)
        assert torch.equal(inputs[:, 1:], targets[:, :-1])  # the targets are the next tokens
