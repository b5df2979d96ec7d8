"""Issue 42: a step's FLOPs as torch's own counter gives them, for any model (engine/rank/watch/flop_count.py
replays the step on fake tensors), and the demos' analytic count held to the same counter."""

import argparse
import contextlib

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from mgpu_tui.demos.model import build_model
from mgpu_tui.demos.transformer import build_gpt
from mgpu_tui.engine.planning.shapes import MlpShape, model_shape
from mgpu_tui.engine.rank.watch import flop_count


def counted_step(model, *inputs, loss_of=lambda out: out.float().square().mean()) -> int:
    """torch's counter over one real eager step (forward and backward)."""
    flop_count.register_missing_formulas(torch)
    with FlopCounterMode(display=False) as counter:
        loss_of(model(*inputs)).backward()
    model.zero_grad(set_to_none=True)
    return counter.get_total_flops()


@pytest.mark.parametrize(
    "name, overrides",
    [
        ("gpt-tiny", {}),
        ("gpt-125m", {"layers": 2, "seq_len": 64}),
        ("gpt-1.3b", {"layers": 1, "seq_len": 32, "d_model": 256, "heads": 4}),
    ],
)
def test_the_gpt_demos_analytic_count_is_torchs_counter_on_an_eager_step(name, overrides):
    shape = model_shape(name, **overrides)
    torch.manual_seed(0)
    model = build_gpt(shape)
    ids = torch.randint(0, shape.vocab, (2, shape.seq_len))
    counted = counted_step(model, ids)
    analytic = shape.flops_per_token * shape.seq_len * 2
    assert abs(analytic - counted) <= 0.01 * counted, (analytic, counted)


def test_the_mlp_demos_count_is_torchs_counter_exactly():
    shape = MlpShape(width=32, depth=3)
    model = build_model(argparse.Namespace(width=32, depth=3, seed=0, shape=None))
    counted = counted_step(model, torch.randn(5, 32))
    assert shape.flops_per_sample * 5 == counted


def test_a_fake_replay_counts_what_a_real_step_does_and_touches_nothing_real():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(24, 48), torch.nn.ReLU(), torch.nn.Linear(48, 3))
    x = torch.randn(7, 24)
    before = [p.detach().clone() for p in model.parameters()]
    call = flop_count.describe(torch, (x,), {})
    replayed = flop_count.count(torch, model, call)
    assert replayed == counted_step(model, x) == 2 * 7 * (24 * 48 + 48 * 3) * 3 - 2 * 7 * 24 * 48
    assert all(p.grad is None for p in model.parameters())  # no fake gradient left in .grad
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_a_compiled_model_is_counted_on_its_eager_module_and_stays_compiled():
    calls = []

    def backend(graph, example_inputs):  # counts each time the compiled graph runs
        def run(*args):
            calls.append(1)
            return graph.forward(*args)

        return run

    torch.manual_seed(0)
    eager = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 16))
    model = torch.compile(eager, backend=backend)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(4, 16)
    counted = None
    for step in range(6):
        model(x).square().mean().backward()
        optimizer.step()
        optimizer.zero_grad()
        if step == 1:  # at a step boundary, as the watch counts
            counted = flop_count.count(torch, model, flop_count.describe(torch, (x,), {}))
    assert len(calls) == 6  # the compiled graph ran at every step, the ones after the count too
    assert counted == counted_step(eager, x)


def test_a_forward_that_reads_its_datas_values_cannot_be_counted_and_says_why():
    class ReadsValues(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Linear(4, 1)

        def forward(self, x):
            if x.sum().item() > 0:  # data-dependent: fake tensors have no values
                return self.net(x)
            return self.net(-x)

    call = flop_count.describe(torch, (torch.randn(2, 4),), {})
    with pytest.raises(flop_count.NotCounted, match="could not be replayed on fake tensors"):
        flop_count.count(torch, ReadsValues(), call)


def test_the_precision_is_the_autocast_dtype_else_the_weights_with_tf32_on_cuda_only():
    assert flop_count.precision_name("torch.bfloat16", "cuda", tf32=False) == "bf16"
    assert flop_count.precision_name("torch.float32", "cuda", tf32=True) == "tf32"
    assert flop_count.precision_name("torch.float32", "cuda", tf32=False) == "fp32"
    assert flop_count.precision_name("torch.float32", "cpu", tf32=True) == "fp32"
    assert flop_count.precision_name("torch.float8_e4m3fn", "cuda", tf32=False) == "fp8"
    model = torch.nn.Linear(3, 3)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        call = flop_count.describe(torch, (torch.randn(2, 3),), {})
    assert flop_count.precision(torch, model, call) == "bf16"
    assert flop_count.precision(torch, model, flop_count.describe(torch, (torch.randn(2, 3),), {})) == "fp32"


def test_the_scripts_hooks_never_see_the_replay_and_stay_in_place():
    seen, everywhere = [], []
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    model[0].register_forward_hook(lambda module, args, out: seen.append(out))  # keeps an activation
    handle = torch.nn.modules.module.register_module_forward_hook(lambda m, a, o: everywhere.append(m))
    try:
        x = torch.randn(3, 8)
        assert flop_count.count(torch, model, flop_count.describe(torch, (x,), {})) > 0
        assert seen == [] and everywhere == []  # no fake tensor handed to the script's hooks
        model(x)
        assert len(seen) == 1 and not isinstance(seen[0], torch._subclasses.FakeTensor) and everywhere
    finally:
        handle.remove()


def test_counting_can_be_turned_off_and_says_so(monkeypatch):
    monkeypatch.setenv("MGPU_FLOPS", "0")
    counted = flop_count.StepFlops(torch)
    model = torch.nn.Linear(4, 2)
    counted.seen(model, (torch.randn(2, 4),), {})
    assert counted.total(contextlib.nullcontext) is None
    assert counted.note == "counting FLOPs is off (MGPU_FLOPS=0)" and counted.news


def test_inputs_that_cannot_be_described_stop_the_count_and_never_raise(monkeypatch):
    counted = flop_count.StepFlops(torch)

    def refuses(*args, **kwargs):
        raise TypeError("an input of a kind nobody flattens")

    monkeypatch.setattr(flop_count, "describe", refuses)
    counted.seen(torch.nn.Linear(2, 2), (object(),), {})  # no exception into the script's forward
    assert counted.note == "its forward's inputs could not be described (TypeError)" and counted.news
    assert counted.total(contextlib.nullcontext) is None


def test_forwards_without_a_step_are_never_held_without_bound():
    counted = flop_count.StepFlops(torch)
    model, x = torch.nn.Linear(2, 2), torch.randn(1, 2)
    for _ in range(flop_count.MAX_FORWARDS + 5):
        counted.seen(model, (x,), {})
    assert len(counted._calls) == 0 and "more than 1024 forwards" in counted.note


class Stack(torch.nn.Module):
    """Repeated blocks (a ModuleList of identical ones), as deep models are built."""

    def __init__(self, blocks: int = 6, *, reuse: bool = False, tuples: bool = False) -> None:
        super().__init__()
        self.inp = torch.nn.Linear(16, 32)
        self.blocks = torch.nn.ModuleList(
            torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.GELU()) for _ in range(blocks)
        )
        self.out = torch.nn.Linear(32, 4)
        self.reuse, self.tuples = reuse, tuples

    def forward(self, x):
        x = self.inp(x)
        for block in self.blocks:
            x = block(x)
            if self.reuse:  # the same block twice: the second call is counted again
                x = block(x)
            if self.tuples:
                x = (x, x.sum())[0]
        return self.out(x)


class Stages(torch.nn.Module):
    """Repeated blocks inside repeated stages: a stage's count holds its own blocks' repeats."""

    def __init__(self) -> None:
        super().__init__()
        self.inp = torch.nn.Linear(16, 32)
        self.stages = torch.nn.ModuleList(
            torch.nn.Sequential(
                *(torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.GELU()) for _ in range(3))
            )
            for _ in range(3)
        )
        self.out = torch.nn.Linear(32, 4)

    def forward(self, x):
        x = self.inp(x)
        for stage in self.stages:
            x = stage(x)
        return self.out(x)


class Checkpointed(Stack):
    def forward(self, x):
        x = self.inp(x)
        for block in self.blocks:
            x = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)
        return self.out(x)


def frozen(model, *parts):
    for part in parts:
        part.requires_grad_(False)
    return model


def stacks():
    yield "repeated blocks", Stack()
    yield "a block called twice", Stack(reuse=True)
    yield "blocks whose outputs are tuples' first", Stack(tuples=True)
    lower = Stack()
    yield "the lower blocks frozen", frozen(lower, *lower.blocks[:3])
    low = Stack()
    yield "the input layer and two blocks frozen", frozen(low, low.inp, *low.blocks[:2])
    high = Stack()
    yield "the upper blocks frozen", frozen(high, *high.blocks[3:])
    yield "checkpointed blocks", Checkpointed()
    yield "repeated blocks in repeated stages", Stages()
    yield "a 3-layer GPT", build_gpt(model_shape("gpt-125m", layers=3, seq_len=32, d_model=128, heads=4))


@pytest.mark.parametrize("what, model", list(stacks()), ids=[w for w, _ in stacks()])
def test_repeated_blocks_replayed_once_count_exactly_what_a_real_step_does(what, model):
    """A repeated block is replayed once per input signature and its FLOPs added for each call
    (flop_count.Twins): a replay of GPT-2 small fell from ~800 ms to ~150 ms. The count is torch's
    counter on a real eager step, exactly, whatever is frozen, reused or checkpointed; the blocks'
    own forwards are theirs again after."""
    torch.manual_seed(0)
    x = torch.randint(0, 512, (2, 32)) if isinstance(model, torch.nn.Sequential) else torch.randn(5, 16)
    forwards = [m.__dict__.get("forward") for m in model.modules()]
    assert flop_count.count(torch, model, flop_count.describe(torch, (x,), {})) == counted_step(model, x)
    assert [m.__dict__.get("forward") for m in model.modules()] == forwards


class TwoInputs(torch.nn.Module):
    """A forward of keyword and nested inputs, as Hugging Face models and custom batches take them."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = torch.nn.Linear(6, 4), torch.nn.Linear(3, 4)

    def forward(self, x, extra=None, scale=1.0):
        y = extra["y"] if isinstance(extra, dict) else extra
        return self.a(x) * scale + (self.b(y) if y is not None else 0)


def test_flat_and_nested_inputs_are_described_apart_and_replayed_as_a_real_step_counts():
    model, x, y = TwoInputs(), torch.randn(5, 6), torch.randn(5, 3)
    flat = flop_count.describe(torch, (x,), {"extra": y, "scale": 2.0})  # tensors and plain values
    nested = flop_count.describe(torch, (x,), {"extra": {"y": y}})  # through torch's pytree
    assert flop_count.count(torch, model, flat) == counted_step(model, x, y) == 2 * 5 * (6 * 4 + 3 * 4) * 2
    assert flop_count.count(torch, model, nested) == counted_step(model, x, {"y": y})
    assert flat.kwargs["scale"] == 2.0 and flat.key != nested.key
    assert flat.key == flop_count.describe(torch, (x,), {"extra": y, "scale": 2.0}).key
    assert flat.key != flop_count.describe(torch, (x,), {"extra": y, "scale": 3.0}).key
    assert flat.key != flop_count.describe(torch, (torch.randn(7, 6),), {"extra": y, "scale": 2.0}).key
    assert flop_count.describe(torch, (x, y), {}).key != flop_count.describe(torch, (x,), {"extra": y}).key
