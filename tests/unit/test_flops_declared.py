"""Issue 54: a graph inductor compiled is counted from what it declares (flops/declared.py): its
post-grad graph's text, which inductor keeps with every compiled graph, cached ones too. The texts
here are torch 2.13's own, recorded from inductor on the CPU (tests/fixtures/inductor/), and the
count of each pair (forward, backward) is torch's FlopCounterMode on the same eager step, exactly;
what a text cannot tell is a reason, never a number. And the watch's hooks set aside where the job
scripts or exports its model (wrapping.hooks_set_aside) go back where they were."""

from pathlib import Path

import pytest
import torch

from mgpu_tui.engine.rank.watch import flops, wrapping

TEXTS = Path(__file__).resolve().parents[1] / "fixtures" / "inductor"


def declared(name: str) -> list:
    flops.register_missing_formulas(torch)
    texts = [(TEXTS / f"{name}.{part}.txt").read_text() for part in ("forward", "backward")]
    return [flops.declared_flops(torch, text) for text in texts]


@pytest.mark.parametrize(
    "name, eager",
    [
        # Linear(32, 64), GELU, Linear(64, 8) on 16 samples: addmm twice, then three mm.
        ("mlp", 180224),
        # gpt-tiny (demos/transformer.py) on 2 sequences of 32 tokens: the CPU's fused attention
        # returns a tuple, whose items the text gives one by one.
        ("gpt-tiny", 47710208),
    ],
)
def test_a_compiled_graph_declares_the_flops_torchs_counter_counts_on_the_eager_step(name, eager):
    forward, backward = declared(name)
    assert forward + backward == eager


def test_a_graph_compiled_for_dynamic_shapes_declares_none_and_says_why():
    assert declared("mlp-dynamic") == ["it was compiled for dynamic shapes"] * 2


def test_a_graph_with_subgraphs_or_no_text_declares_none_and_says_why():
    text = (TEXTS / "mlp.forward.txt").read_text()
    assert flops.declared_flops(torch, text + text) == "it calls subgraphs of its own"
    assert flops.declared_flops(torch, "") == "inductor kept no text of it"
    broken = text.replace("primals_3: ", "unknown: ")  # an argument whose shape the text never says
    assert flops.declared_flops(torch, broken) == "its text does not say the shape of primals_3"


def test_the_hooks_set_aside_go_back_in_their_places_and_the_jobs_own_stay():
    model = torch.nn.Linear(2, 2)
    seen = []
    model.register_forward_hook(lambda *a: seen.append("job's first"))
    ours = model.register_forward_hook(lambda *a: seen.append("watch"), always_call=True)
    wrapping.keep_out_of_copies(model, ours.id)
    model.register_forward_hook(lambda *a: seen.append("job's second"))
    before = {name: list(getattr(model, name)) for name in wrapping._HOOK_STATE}
    with wrapping.hooks_set_aside():
        model(torch.ones(1, 2))
        assert seen == ["job's first", "job's second"]
        model.register_forward_hook(lambda *a: seen.append("job's meanwhile"))
    seen.clear()
    model(torch.ones(1, 2))
    assert seen == ["job's first", "watch", "job's second", "job's meanwhile"]
    after = {name: list(getattr(model, name))[: len(before[name])] for name in wrapping._HOOK_STATE}
    assert after == before
