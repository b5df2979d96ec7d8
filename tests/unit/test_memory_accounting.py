"""Issue 60: a rank's memory read directly from its objects (engine/rank/watch/memory/accounting.py),
held to numel x element size counted here over the same objects: Adam's and AdamW's two moments and
step counters, SGD's momentum buffer (and none without momentum), a tied weight and views counted
once; and the engine's figures from the step events (engine/run/memory/memory_parts.py)."""

import pytest
import torch
import torch.nn as nn

from mgpu_tui.engine.protocol.events import Step, parse_line
from mgpu_tui.engine.rank.watch.memory.accounting import Accounting
from mgpu_tui.engine.run.memory.memory_parts import MemoryTrack


def nbytes(t) -> int:
    return t.numel() * t.element_size()


class Tied(nn.Module):
    def __init__(self, dtype=torch.float32) -> None:
        super().__init__()
        self.embed = nn.Embedding(50, 16, dtype=dtype)
        self.mid = nn.Linear(16, 24, dtype=dtype)
        self.head = nn.Linear(16, 50, bias=False, dtype=dtype)
        self.head.weight = self.embed.weight  # tied: one parameter, one storage
        self.norm = nn.BatchNorm1d(24, dtype=dtype)  # buffers: running mean and var, a step counter

    def forward(self, ids):
        x = self.embed(ids)
        return self.head(x + self.norm(self.mid(x)).mean(-1, keepdim=True))


def stepped(model, optimizer, steps: int = 2):
    for _ in range(steps):
        optimizer.zero_grad(set_to_none=True)
        model(torch.arange(12) % 50).square().mean().backward()
        optimizer.step()


def read(model, *optimizers) -> dict[str, int]:
    accounting = Accounting()
    for optimizer in optimizers:
        accounting.optimizer_stepped(optimizer)
    figures = accounting.read(torch, model)
    assert figures is not None
    return figures


MOMENTS = {  # the optimizer, and its state per parameter p (bytes), as the optimizer's docs say it
    "adam": (lambda p: torch.optim.Adam(p, lr=1e-3), lambda p: 2 * nbytes(p) + 4),  # exp_avg(_sq), step
    "adamw": (lambda p: torch.optim.AdamW(p, lr=1e-3), lambda p: 2 * nbytes(p) + 4),
    "sgd": (lambda p: torch.optim.SGD(p, lr=1e-2), lambda p: 0),
    "sgd-momentum": (lambda p: torch.optim.SGD(p, lr=1e-2, momentum=0.9), lambda p: nbytes(p)),
}


@pytest.mark.parametrize("name", MOMENTS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_each_part_is_numel_times_element_size_to_the_byte(name, dtype):
    make, state_of = MOMENTS[name]
    model = Tied(dtype)
    optimizer = make(model.parameters())
    stepped(model, optimizer)
    params = list(model.parameters())  # the tied weight once
    assert len(params) == 5
    figures = read(model, optimizer)
    assert figures == {
        "parameters": sum(nbytes(p) for p in params),
        "buffers": sum(nbytes(b) for b in model.buffers()),
        "gradients": sum(nbytes(p.grad) for p in params),
        "optimizer": sum(state_of(p) for p in params),
    }
    # and the optimizer's own state, counted here over its tensors, is that
    state = [v for s in optimizer.state.values() for v in s.values() if torch.is_tensor(v)]
    assert figures["optimizer"] == sum(nbytes(v) for v in state)


def test_a_storage_is_counted_once_whatever_views_of_it_come():
    model = nn.Linear(8, 8)
    model.register_buffer("row", model.weight.data[0])  # a view of a parameter: the parameter's
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)  # each parameter read from both
    stepped_once = model(torch.ones(2, 8)).sum()
    stepped_once.backward()
    optimizer.step()
    figures = read(model, optimizer)
    assert figures["parameters"] == (64 + 8) * 4
    assert figures["buffers"] == 0
    assert figures["gradients"] == (64 + 8) * 4


def test_before_any_step_and_with_no_model_the_optimizers_parameters_are_read():
    model = nn.Linear(4, 3)
    optimizer = torch.optim.Adam(model.parameters())
    assert read(None, optimizer) == {"parameters": 60, "buffers": 0, "gradients": 0, "optimizer": 0}
    assert Accounting().read(torch, None) is None  # nothing seen: nothing said


def test_two_optimizers_each_count_their_own_state():
    a, b = nn.Linear(4, 4), nn.Linear(4, 2)
    oa, ob = torch.optim.AdamW(a.parameters()), torch.optim.SGD(b.parameters(), lr=0.1, momentum=0.5)
    for optimizer, model in ((oa, a), (ob, b)):
        model(torch.ones(1, 4)).sum().backward()
        optimizer.step()
    figures = read(None, oa, ob)
    assert figures["parameters"] == (20 + 10) * 4
    assert figures["optimizer"] == 2 * 20 * 4 + 2 * 4 + 10 * 4


def _step(step: int, **fields) -> Step:
    line = {"v": 1, "kind": "step", "rank": 0, "t": 1.0, "step": step, "samples": 1, "step_s": 0.1,
            "mem_peak_bytes": 10_000, **fields}  # fmt: skip
    import json

    event = parse_line(json.dumps(line))
    assert isinstance(event, Step)
    return event


def test_the_engine_takes_the_last_accounting_and_the_rest_from_the_peak():
    track = MemoryTrack()
    parts = {"parameters": 100, "buffers": 4, "gradients": 100, "optimizer": 208}
    track.add(_step(1, mem_bytes=5000, memory_parts=parts))
    figures = track.figures(0, 10_000)
    assert figures is not None and figures.held == 412 and figures.rest is None  # no activations yet
    track.add(_step(2, mem_bytes=5000, memory_parts=parts, activations_bytes=600, observed=True))
    figures = track.figures(0, 10_000)
    assert figures is not None and (figures.activations, figures.rest) == (600, 10_000 - 412 - 600)
    assert not figures.leaks and figures.kept_graphs is None
    assert MemoryTrack().figures(0, 10_000) is None  # a rank that said nothing of it


def test_a_leak_is_named_with_its_growth_per_step():
    track = MemoryTrack()
    for step in range(1, 21):
        kept = max(0, step - 4)
        parts = {"parameters": 8, "buffers": 0, "gradients": 8, "optimizer": 0}
        track.add(
            _step(
                step,
                mem_bytes=1000 + 64 * step,
                memory_parts=parts,
                kept_graphs=kept,
                kept_by="`kept` at a.py:3",
            )
        )
    figures = track.figures(0, 10_000)
    assert figures is not None and figures.leaks and figures.kept_graphs == 16
    assert figures.growth_per_step == pytest.approx(64.0)
    assert figures.kept_by == "`kept` at a.py:3"


def test_a_malformed_memory_figure_is_no_event():
    from mgpu_tui.engine.protocol.events import MalformedEvent

    with pytest.raises(MalformedEvent):
        _step(1, memory_parts={"parameters": -1, "buffers": 0, "gradients": 0, "optimizer": 0})
    with pytest.raises(MalformedEvent):
        _step(1, memory_parts=[1, 2, 3, 4])


def test_creep_counts_the_earlier_losses_kept_with_their_graphs_and_finds_what_keeps_them():
    import sys

    from mgpu_tui.engine.rank.watch.memory.creep import Creep

    model, leaky, clean = nn.Linear(2, 1), Creep(), Creep()
    kept, counts = [], []
    for step in range(1, 16):
        loss = model(torch.ones(1, 2)).sum()
        loss.backward()
        leaky.loss(loss)
        kept.append(loss)
        counts.append(leaky.at_step(step, sys._getframe()))
        clean_loss = model(torch.ones(1, 2)).sum()
        clean_loss.backward()
        clean.loss(clean_loss)
        assert clean.at_step(step, sys._getframe()) is None  # its loss lives until the next step only
    assert counts == [None] * 5 + list(range(1, 11))  # watched after 3 steps, the last two left out
    assert leaky.kept_by is not None and leaky.kept_by.startswith("`kept` in test_creep_counts")
    assert leaky.kept_by.endswith(": kept.append(loss))")
    assert clean.kept_by is None
