"""Issue 54: a step's FLOPs counted as the step the job really runs (engine/rank/watch/flops/), never
by running any of it again, and held to independent counts: torch's own FlopCounterMode on the same
step, the GPT demos' analytic count, the MLP demo's exactly; what it cannot see said as a reason."""

import argparse
import importlib

import pytest
import torch
from torch.utils.checkpoint import checkpoint

from mgpu_tui.demos.model import build_model
from mgpu_tui.demos.transformer import build_gpt
from mgpu_tui.engine.planning.shapes import MlpShape, model_shape
from mgpu_tui.engine.rank.watch import flops
from mgpu_tui.engine.rank.watch.flops import compiled, step_flops
from watched_steps import Watched, square_mean, torchs_count

dispatch = importlib.import_module("torch.utils._python_dispatch")


def no_mode_open() -> bool:
    return dispatch._get_current_dispatch_mode() is None and compiled.current is None


@pytest.mark.parametrize(
    "name, overrides",
    [
        ("gpt-tiny", {}),
        ("gpt-125m", {"layers": 2, "seq_len": 32, "d_model": 128, "heads": 4}),  # its tied head
        ("gpt-1.3b", {"layers": 1, "seq_len": 32, "d_model": 256, "heads": 4}),
    ],
)
def test_the_gpt_demos_analytic_count_is_the_observed_count_within_one_percent(name, overrides):
    shape = model_shape(name, **overrides)
    torch.manual_seed(0)
    model = build_gpt(shape)
    ids = torch.randint(0, shape.vocab, (2, shape.seq_len))
    counted = Watched(model).step(ids)
    analytic = shape.flops_per_token * shape.seq_len * 2
    assert counted.observed and abs(analytic - counted.flops) <= 0.01 * counted.flops, (analytic, counted)
    assert counted.flops == torchs_count(model, ids)


def test_the_mlp_demos_count_is_the_observed_count_exactly():
    shape = MlpShape(width=32, depth=3)
    model = build_model(argparse.Namespace(width=32, depth=3, seed=0, shape=None))
    x = torch.randn(5, 32)
    assert Watched(model).step(x).flops == shape.flops_per_sample * 5 == torchs_count(model, x)


def test_a_step_is_counted_as_it_runs_once_per_shape_and_computes_what_it_computes_bare():
    """The count's mode passes every operation through: the gradients are bit for bit a bare step's.
    Each shape is observed once; a known shape's step is counted from what was kept."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(24, 48), torch.nn.ReLU(), torch.nn.Linear(48, 3))
    bare = torch.nn.Sequential(torch.nn.Linear(24, 48), torch.nn.ReLU(), torch.nn.Linear(48, 3))
    bare.load_state_dict(model.state_dict())
    watched = Watched(model)
    per_sample = 2 * (24 * 48 + 48 * 3) * 3 - 2 * 24 * 48  # no gradient for the data
    for batch, observed in ((7, True), (7, False), (5, True), (7, False)):
        x = torch.randn(batch, 24)
        assert watched.step(x, micro_batches=2) == flops.Counted(2 * batch * per_sample, 0, observed)
        bare.zero_grad(set_to_none=True)
        for _ in range(2):
            square_mean(bare(x)).backward()
        assert all(torch.equal(a.grad, b.grad) for a, b in zip(model.parameters(), bare.parameters()))
    assert no_mode_open()


def test_a_compiled_model_stays_compiled_while_its_step_is_counted():
    """Under the count's mode (ignore_compile_internals), the compiled graph runs at every step, the
    counted ones too; a backend that runs its graph's operations is counted as eager is."""
    calls = []

    def backend(graph, example_inputs):
        def run(*args):
            calls.append(1)
            return graph.forward(*args)

        return run

    torch.manual_seed(0)
    eager = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 16))
    model = torch.compile(eager, backend=backend)
    watched, x = Watched(model), torch.randn(4, 16)
    try:
        counts = [watched.step(x) for _ in range(6)]
        assert len(calls) == 6  # the compiled graph ran at every step, the counted ones included
        # The first step compiled inside its window: counted again at the next, once compiled.
        assert [c.observed for c in counts] == [True, True, False, False, False, False]
        assert [c.flops for c in counts] == [None] + [torchs_count(eager, x)] * 5
        assert compiled.backends_in_use() == ["own:backend"]
    finally:
        torch._dynamo.reset()


def test_a_backend_whose_kernels_are_not_seen_makes_the_count_na_and_says_why():
    model = torch.nn.Linear(4, 4)
    try:
        torch.compile(model, backend="cudagraphs")  # recorded by Dynamo as it is made
        watched = Watched(model)
        assert watched.step(torch.randn(2, 4)).flops is None
        assert "backend cudagraphs runs kernels that torch's dispatcher does not see" in watched.counted.note
    finally:
        torch._dynamo.reset()
    assert no_mode_open()


class Raises(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        out = self.lin(x)
        if x.shape[0] == 3:
            raise ValueError("the job's own error")
        return out


def test_the_window_closes_on_every_exception_and_the_jobs_error_is_its_own():
    watched = Watched(Raises())
    with pytest.raises(ValueError, match="the job's own error"):
        watched.step(torch.randn(3, 4))  # the forward raises inside its window
    assert no_mode_open()
    with pytest.raises(RuntimeError):
        watched.step(torch.randn(2, 4), loss_of=lambda out: out)  # backward of a non-scalar raises
    assert no_mode_open()
    assert watched.step(torch.randn(2, 4)).flops == torchs_count(watched.model, torch.randn(2, 4))


class Checkpointed(torch.nn.Module):
    def __init__(self, reentrant: bool) -> None:
        super().__init__()
        self.inp, self.out = torch.nn.Linear(16, 32), torch.nn.Linear(32, 4)
        self.blocks = torch.nn.ModuleList(
            torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.GELU()) for _ in range(3)
        )
        self.reentrant = reentrant

    def forward(self, x, recompute: bool = True):
        x = self.inp(x)
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=self.reentrant) if recompute else block(x)
        return self.out(x)


@pytest.mark.parametrize("reentrant", [False, True], ids=["non-reentrant", "reentrant"])
def test_recomputed_activations_are_counted_apart_mfu_leaves_them_out(reentrant):
    """torch.utils.checkpoint runs each block's forward again inside the backward (under
    enable_grad): those FLOPs are ``recomputed`` (HFU's), and ``flops`` (MFU's) is the model's, the
    same as without checkpointing."""
    torch.manual_seed(0)
    watched, x = Watched(Checkpointed(reentrant)), torch.randn(5, 16)
    plain = watched.step(x, recompute=False)
    again = watched.step(x)
    assert again.flops == plain.flops and plain.recomputed == 0
    assert again.recomputed == 3 * 2 * 5 * 32 * 32  # each block's matrix multiply, forward, once more


def test_attention_is_counted_as_its_device_runs_it():
    """On the CPU scaled-dot-product attention runs a fused kernel, to which the count gives the
    formula torch gives the GPU's fused kernels (torch's own counter counts it 0)."""
    shape = model_shape("gpt-tiny", seq_len=32)
    torch.manual_seed(0)
    model = build_gpt(shape)
    ids = torch.randint(0, shape.vocab, (2, shape.seq_len))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        counted = Watched(model).step(ids)
        real = torchs_count(model, ids)
    assert counted.flops == real


def test_keyword_and_nested_inputs_are_keyed_apart():
    x, y = torch.randn(5, 6), torch.randn(5, 3)
    flat = flops.describe(torch, (x,), {"extra": y, "scale": 2.0})
    nested = flops.describe(torch, (x,), {"extra": {"y": y}})
    assert flat.key != nested.key
    assert flat.key == flops.describe(torch, (x,), {"extra": y, "scale": 2.0}).key
    assert flat.key != flops.describe(torch, (x,), {"extra": y, "scale": 3.0}).key
    assert flat.key != flops.describe(torch, (torch.randn(7, 6),), {"extra": y, "scale": 2.0}).key
    assert flops.describe(torch, (x, y), {}).key != flops.describe(torch, (x,), {"extra": y}).key


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


def test_counting_can_be_turned_off_and_says_so(monkeypatch):
    monkeypatch.setenv("MGPU_FLOPS", "0")
    watched = Watched(torch.nn.Linear(4, 2))
    assert watched.step(torch.randn(2, 4)) == flops.Counted(None, None, False)
    assert watched.counted.note == "counting FLOPs is off (MGPU_FLOPS=0)" and watched.counted.news


def test_inputs_that_cannot_be_described_stop_the_count_and_never_raise(monkeypatch):
    def refuses(*args, **kwargs):
        raise TypeError("an input of a kind nobody flattens")

    monkeypatch.setattr(step_flops, "describe", refuses)
    watched = Watched(torch.nn.Linear(2, 2))
    assert watched.step(torch.randn(3, 2)).flops is None  # and no exception into the job's forward
    assert watched.counted.note == "its forward's inputs could not be described (TypeError)"


def test_forwards_without_a_step_are_never_held_without_bound():
    counted, model, x = flops.StepFlops(torch), torch.nn.Linear(2, 2), torch.randn(1, 2)
    for _ in range(flops.MAX_FORWARDS + 5):
        counted.forward_begins(model, (x,), {})
        counted.forward_ends()
    assert len(counted._forwards) == flops.MAX_FORWARDS and "more than 1024 forwards" in counted.note
    assert no_mode_open()


def test_more_shapes_than_the_bound_stop_the_count_and_say_why():
    watched = Watched(torch.nn.Linear(2, 2))
    for batch in range(1, flops.MAX_SHAPES + 2):
        counted = watched.step(torch.randn(batch, 2))
    assert counted.flops is None and f"more than {flops.MAX_SHAPES} input shapes" in watched.counted.note


def test_a_step_with_no_forward_of_the_model_is_na_after_the_first_and_says_why():
    """The first step of a job with no DDP or FSDP has none: its model is found when it first steps
    (model_root.find_root). Any later one has no figure, and the reason is told."""
    counted, x = flops.StepFlops(torch), torch.randn(2, 2, requires_grad=True)
    for step in range(2):
        counted.backward_begins(False)
        x.square().sum().backward()
        counted.backward_ends()
        assert counted.total().flops is None and (counted.note is None) == (step == 0)
    assert "no forward of the model it trains was seen" in counted.note


def test_a_backward_inside_the_roots_forward_is_that_forwards_count():
    """Lightning's manual optimization runs backward() and the optimizer inside training_step,
    inside DDP's forward: the backward is counted with the forward, once; the step that ends inside
    the forward whose window is still open has no figure, the later ones do."""
    steps = []

    class StepsInside(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(8, 8)

        def forward(self, x):
            loss = self.lin(x).square().mean()
            watched.counted.backward_begins(False)
            loss.backward()
            watched.counted.backward_ends()
            steps.append(watched.counted.total())  # the optimizer's step, inside the forward
            return loss.detach()

    watched = Watched(StepsInside())
    x = torch.randn(4, 8)
    for _ in range(3):
        watched.model(x)
    eight = 2 * 4 * 8 * 8  # the forward's, and the weight's gradient's (the data needs none)
    assert steps == [flops.Counted(None, None, True), *[flops.Counted(2 * eight, 0, False)] * 2]
    assert no_mode_open()


def test_a_loop_run_inside_an_except_block_is_counted_as_any_other():
    """A window that closes while the job handles an exception of its own (its loop inside an
    ``except``) is a whole one: only an exception raised inside the forward or backward drops it."""
    watched, x = Watched(torch.nn.Linear(4, 4)), torch.randn(2, 4)
    try:
        raise KeyError("the job's own, handled")
    except KeyError:
        assert watched.step(x).flops == torchs_count(watched.model, x)
    assert no_mode_open()


def test_lightnings_training_step_is_counted_whole_as_the_forward_once_per_batch_shape():
    """Lightning on one device (engine/rank/watch/frameworks.py): its training_step is the step's
    forward, the count's window opened around it and keyed by its batch alone (the batch index
    changes every step); the model's own forward inside it neither opens nor closes the window, so
    what training_step computes after it (a head outside forward) is counted too."""
    from mgpu_tui.engine.rank.watch.script_watch import ScriptWatch

    model, head = torch.nn.Linear(8, 16), torch.randn(16, 4)
    watch = ScriptWatch(None, "train.py")
    watch.torch = watch._root.torch = torch
    watch._flops = flops.StepFlops(torch)
    watch.hook_root(model, "the model")
    x = torch.randn(4, 8)

    def training_step(batch, batch_idx):
        with watch.whole_forward((batch, batch_idx), {}, model):
            loss = (model(batch) @ head).square().mean()
        watch.flops_window("backward_begins", False)
        try:
            loss.backward()
        finally:
            watch.flops_window("backward_ends")
        return watch._flops.total()

    whole = torchs_count(model, x, loss_of=lambda out: (out @ head).square().mean())
    counted = [training_step(x, i) for i in range(3)]
    assert counted == [flops.Counted(whole, 0, True), *[flops.Counted(whole, 0, False)] * 2]
    assert whole > torchs_count(model, x)  # the head's matmul is in it
    assert no_mode_open()
