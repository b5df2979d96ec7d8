"""Issue 42: a step's FLOPs as torch's own counter gives them, for any model (engine/rank/watch/flops.py
replays the step on fake tensors), and the demos' analytic count held to the same counter."""

import argparse
import contextlib

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from mgpu_tui.demos.model import build_model
from mgpu_tui.demos.transformer import build_gpt
from mgpu_tui.engine.planning.shapes import MlpShape, model_shape
from mgpu_tui.engine.rank.watch import flops
from mgpu_tui.engine.rank.watch.flops import step_flops

REPLAYS = {"fake": flops.count, "meta": flops.count_on_meta}


@pytest.fixture(params=list(REPLAYS))
def replay(request):
    """Each replay: on fake tensors (the reference), and on meta tensors (kept where it agrees)."""
    return REPLAYS[request.param]


def counted_step(model, *inputs, loss_of=lambda out: out.float().square().mean()) -> int:
    """torch's counter over one real eager step (forward and backward)."""
    flops.register_missing_formulas(torch)
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


def test_a_replay_counts_what_a_real_step_does_and_touches_nothing_real(replay):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(24, 48), torch.nn.ReLU(), torch.nn.Linear(48, 3))
    x = torch.randn(7, 24)
    params = list(model.parameters())
    before = [p.detach().clone() for p in params]
    call = flops.describe(torch, (x,), {})
    replayed = replay(torch, model, call)
    assert replayed == counted_step(model, x) == 2 * 7 * (24 * 48 + 48 * 3) * 3 - 2 * 7 * 24 * 48
    assert all(p.grad is None for p in model.parameters())  # no fake gradient left in .grad
    assert all(a is b for a, b in zip(params, model.parameters()))  # the module's own, put back
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_a_compiled_model_is_counted_on_its_eager_module_and_stays_compiled(replay):
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
            counted = replay(torch, model, flops.describe(torch, (x,), {}))
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

    call = flops.describe(torch, (torch.randn(2, 4),), {})
    with pytest.raises(flops.NotCounted, match="could not be replayed on fake tensors"):
        flops.count(torch, ReadsValues(), call)


def test_the_precision_is_the_autocast_dtype_else_the_weights_with_tf32_on_cuda_only():
    assert flops.precision_name("torch.bfloat16", "cuda", tf32=False) == "bf16"
    assert flops.precision_name("torch.float32", "cuda", tf32=True) == "tf32"
    assert flops.precision_name("torch.float32", "cuda", tf32=False) == "fp32"
    assert flops.precision_name("torch.float32", "cpu", tf32=True) == "fp32"
    assert flops.precision_name("torch.float8_e4m3fn", "cuda", tf32=False) == "fp8"
    model = torch.nn.Linear(3, 3)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        call = flops.describe(torch, (torch.randn(2, 3),), {})
    assert flops.precision(torch, model, call) == "bf16"
    assert flops.precision(torch, model, flops.describe(torch, (torch.randn(2, 3),), {})) == "fp32"


def test_the_scripts_hooks_never_see_the_replay_and_stay_in_place(replay):
    seen, everywhere = [], []
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    model[0].register_forward_hook(lambda module, args, out: seen.append(out))  # keeps an activation
    handle = torch.nn.modules.module.register_module_forward_hook(lambda m, a, o: everywhere.append(m))
    try:
        x = torch.randn(3, 8)
        assert replay(torch, model, flops.describe(torch, (x,), {})) > 0
        assert seen == [] and everywhere == []  # no fake tensor handed to the script's hooks
        model(x)
        assert len(seen) == 1 and not isinstance(seen[0], torch._subclasses.FakeTensor) and everywhere
    finally:
        handle.remove()


def test_counting_can_be_turned_off_and_says_so(monkeypatch):
    monkeypatch.setenv("MGPU_FLOPS", "0")
    counted = flops.StepFlops(torch)
    model = torch.nn.Linear(4, 2)
    counted.seen(model, (torch.randn(2, 4),), {})
    assert counted.total(contextlib.nullcontext) is None
    assert counted.note == "counting FLOPs is off (MGPU_FLOPS=0)" and counted.news


def test_inputs_that_cannot_be_described_stop_the_count_and_never_raise(monkeypatch):
    counted = flops.StepFlops(torch)

    def refuses(*args, **kwargs):
        raise TypeError("an input of a kind nobody flattens")

    monkeypatch.setattr(step_flops, "describe", refuses)
    counted.seen(torch.nn.Linear(2, 2), (object(),), {})  # no exception into the script's forward
    assert counted.note == "its forward's inputs could not be described (TypeError)" and counted.news
    assert counted.total(contextlib.nullcontext) is None


def test_forwards_without_a_step_are_never_held_without_bound():
    counted = flops.StepFlops(torch)
    model, x = torch.nn.Linear(2, 2), torch.randn(1, 2)
    for _ in range(flops.MAX_FORWARDS + 5):
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
def test_repeated_blocks_replayed_once_count_exactly_what_a_real_step_does(what, model, replay):
    """A repeated block is replayed once per input signature and its FLOPs added for each call
    (flops.Twins): a replay of GPT-2 small fell from ~800 ms to ~150 ms. The count is torch's
    counter on a real eager step, exactly, whatever is frozen, reused or checkpointed; the blocks'
    own forwards are theirs again after."""
    torch.manual_seed(0)
    x = torch.randint(0, 512, (2, 32)) if isinstance(model, torch.nn.Sequential) else torch.randn(5, 16)
    forwards = [m.__dict__.get("forward") for m in model.modules()]
    assert replay(torch, model, flops.describe(torch, (x,), {})) == counted_step(model, x)
    assert [m.__dict__.get("forward") for m in model.modules()] == forwards


class TwoInputs(torch.nn.Module):
    """A forward of keyword and nested inputs, as Hugging Face models and custom batches take them."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = torch.nn.Linear(6, 4), torch.nn.Linear(3, 4)

    def forward(self, x, extra=None, scale=1.0):
        y = extra["y"] if isinstance(extra, dict) else extra
        return self.a(x) * scale + (self.b(y) if y is not None else 0)


def test_flat_and_nested_inputs_are_described_apart_and_replayed_as_a_real_step_counts(replay):
    model, x, y = TwoInputs(), torch.randn(5, 6), torch.randn(5, 3)
    flat = flops.describe(torch, (x,), {"extra": y, "scale": 2.0})  # tensors and plain values
    nested = flops.describe(torch, (x,), {"extra": {"y": y}})  # through torch's pytree
    assert replay(torch, model, flat) == counted_step(model, x, y) == 2 * 5 * (6 * 4 + 3 * 4) * 2
    assert replay(torch, model, nested) == counted_step(model, x, {"y": y})
    assert flat.kwargs["scale"] == 2.0 and flat.key != nested.key
    assert flat.key == flops.describe(torch, (x,), {"extra": y, "scale": 2.0}).key
    assert flat.key != flops.describe(torch, (x,), {"extra": y, "scale": 3.0}).key
    assert flat.key != flops.describe(torch, (torch.randn(7, 6),), {"extra": y, "scale": 2.0}).key
    assert flops.describe(torch, (x, y), {}).key != flops.describe(torch, (x,), {"extra": y}).key


@pytest.mark.parametrize("autocast", [False, True], ids=["fp32", "bf16 autocast"])
def test_attention_is_counted_as_its_device_runs_it_on_either_replay(replay, autocast):
    """On the CPU, scaled-dot-product attention runs a fused kernel (torch counts its backward at 2.5
    times its forward); on meta tensors it would be the math path (2 times). The meta replay probes
    each attention call on fake tensors of the real device, under the step's autocast."""
    shape = model_shape("gpt-125m", layers=2, seq_len=64, d_model=128, heads=4)
    torch.manual_seed(0)
    model = build_gpt(shape)
    ids = torch.randint(0, shape.vocab, (3, shape.seq_len))
    context = torch.autocast("cpu", dtype=torch.bfloat16) if autocast else contextlib.nullcontext()
    with context:
        call = flops.describe(torch, (ids,), {})
        real = counted_step(model, ids)
    assert replay(torch, model, call) == real


class Recurrent(torch.nn.Module):
    """An LSTM: its kernel is its device's choice (oneDNN's on the CPU, cuDNN's on a GPU)."""

    def __init__(self) -> None:
        super().__init__()
        self.lstm, self.head = torch.nn.LSTM(8, 16, batch_first=True), torch.nn.Linear(16, 2)

    def forward(self, x):
        return self.head(self.lstm(x)[0])


class DeviceWritten(torch.nn.Module):
    """A forward that computes more where its input is on the CPU: a meta replay would not."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)

    def forward(self, x):
        x = self.a(x)
        return self.b(x) if x.device.type == "cpu" else x


@pytest.mark.parametrize(
    "model, kept",
    [
        (build_gpt(model_shape("gpt-125m", layers=2, seq_len=32, d_model=64, heads=2)), True),
        (Recurrent(), False),
        (DeviceWritten(), False),
    ],
    ids=["a GPT: meta kept", "an LSTM: fake only", "a device written in the forward: fake only"],
)
def test_a_rank_keeps_the_meta_replay_only_where_it_agreed_on_the_first_shape(model, kept):
    """step_flops: the first shape replayed both ways; the meta replay counts the later shapes only
    where the two agreed. Every shape's count is torch's counter on a real step, either way."""
    counted = flops.StepFlops(torch)
    gpt = isinstance(model, torch.nn.Sequential)
    for batch in (4, 3, 2):
        x = torch.randint(0, 512, (batch, 32)) if gpt else torch.randn(batch, 5, 8)
        counted.seen(model, (x,), {})
        assert counted.total(contextlib.nullcontext) == counted_step(model, x), batch
        assert counted.on_meta is kept and counted.note is None
