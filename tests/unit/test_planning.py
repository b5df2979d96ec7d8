"""The memory planner: the named shapes, each mode's state tensor by tensor, and what fits."""

from __future__ import annotations

import json

import pytest

from conftest import cli_in_process
from mgpu_tui.engine.planning.memory import Training, plan, plan_mode
from mgpu_tui.engine.planning.shapes import MODELS, ModelShape, ShapeError, model_shape

GIB = 1 << 30


def by_mode(plans):
    return {p.mode: p for p in plans}


def test_the_named_sizes_have_their_papers_shapes_and_parameter_counts():
    seven = MODELS["gpt-7b"]
    shape = (seven.layers, seven.d_model, seven.heads, seven.seq_len, seven.vocab)
    assert shape == (32, 4096, 32, 4096, 32000)
    assert seven.params == 6_723_084_288  # Llama-2-7B has 6.74e9: within 1%
    # 12 d^2 + 13 d a block; embeddings V d + S d; final norm 2 d and an untied head d V.
    tiny = MODELS["gpt-tiny"]
    assert tiny.params == 2 * (12 * 64 * 64 + 13 * 64) + 256 * 64 + 32 * 64 + 2 * 64 + 64 * 256
    assert tiny.tensors == 2 + 2 * 16 + 3
    # As torch's counter counts (test_flop_count.py holds it to the counter): 6 a matrix weight,
    # attention 14 d s a layer.
    assert tiny.flops_per_token == 6 * (2 * 12 * 64 * 64 + 64 * 256) + 14 * 2 * 64 * 32


def test_a_shape_is_checked_and_can_be_ones_own():
    with pytest.raises(ShapeError, match="multiple of --heads"):
        ModelShape("x", layers=2, d_model=100, heads=3, seq_len=8, vocab=10)
    with pytest.raises(ShapeError, match="a custom model needs --heads, --vocab"):
        model_shape("custom", layers=2, d_model=64, seq_len=16)
    with pytest.raises(ShapeError, match="unknown model 'gpt-9'"):
        model_shape("gpt-9")
    longer = model_shape("gpt-tiny", seq_len=128)
    assert longer.seq_len == 128 and longer.d_ff == 256 and longer.name == "gpt-tiny (changed)"


def test_seven_billion_with_adam_does_not_fit_ddp_on_8x80_gib_but_fits_fsdp():
    plans = by_mode(plan(MODELS["gpt-7b"], 8, Training(optimizer="adam", batch_size=8), 80 * GIB))
    ddp, fsdp = plans["ddp"], plans["fsdp"]
    assert ddp.devices[0].state == pytest.approx(16 * 6.723e9, rel=1e-3)  # 4 + 4 + 8 bytes a parameter
    assert not ddp.fits and fsdp.fits
    # The shards add up to the whole (Adam's per-tensor step is each rank's own: it does not shard).
    assert sum(d.params + d.grads for d in fsdp.devices) == ddp.devices[0].params + ddp.devices[0].grads
    assert fsdp.devices[0].state == pytest.approx(13.45e9, rel=1e-2)


def test_one_point_three_billion_fits_ddp_on_8x80_gib():
    assert by_mode(plan(MODELS["gpt-1.3b"], 8, Training(batch_size=8), 80 * GIB))["ddp"].fits


def test_fsdp_shards_each_tensor_as_torch_chunk_cuts_its_rows():
    tiny = MODELS["gpt-tiny"]
    whole = plan_mode("single", tiny, 1, Training()).devices[0]
    shards = plan_mode("fsdp", tiny, 3, Training(batch_size=3)).devices
    assert sum(d.params for d in shards) == whole.params
    # Position embedding: 32 rows over 3 ranks is 11, 11, 10 rows; the 64-wide norms 22, 22, 20.
    assert [d.params for d in shards][0] > [d.params for d in shards][2]


def test_tensor_parallel_needs_heads_that_divide_and_splits_the_blocks_only():
    tiny = MODELS["gpt-tiny"]
    assert "divisible by 3" in plan_mode("tp", tiny, 3, Training()).note
    two = plan_mode("tp", tiny, 2, Training(batch_size=2)).devices[0]
    whole = plan_mode("single", tiny, 1, Training(batch_size=2)).devices[0]
    d = tiny.d_model
    replicated_per_block = 2 * d + 2 * d + d + d  # the norms and the row-parallel biases
    split_per_block = tiny.block_params - replicated_per_block
    assert two.params == whole.params - tiny.layers * split_per_block // 2 * 4


def test_pipeline_one_f_one_b_holds_fewer_activations_than_gpipe_and_stages_split_the_blocks():
    shape = model_shape("gpt-350m", untied_head=1)  # stages: the head apart from the embeddings
    gpipe = plan_mode("pipeline", shape, 4, Training(batch_size=16, microbatches=8)).devices
    one_f = plan_mode("pipeline", shape, 4, Training(batch_size=16, microbatches=8, schedule="1f1b")).devices
    assert one_f[0].activations < gpipe[0].activations
    assert sum(s.params for s in gpipe) == plan_mode("single", shape, 1, Training()).devices[0].params
    note = plan_mode("pipeline", MODELS["gpt-tiny"], 8, Training()).note
    assert "4 layers cannot be cut into 8 stages" in note


# The ZeRO paper's (Rajbhandari et al. 2020) Table 1 case: 7.5B parameters on 64 GPUs with Adam
# in mixed precision. Here, a GPT of 7,516,020,736 parameters.
ZERO_SHAPE = ModelShape("custom", layers=36, d_model=4096, heads=32, seq_len=1024, vocab=32000)
ADAM_AMP = Training(optimizer="adam", amp=True, batch_size=64)


def test_each_zero_stage_follows_its_formula_in_torchs_byte_split():
    psi, nd = ZERO_SHAPE.params, 64
    assert psi == 7_516_020_736
    plans = by_mode(plan(ZERO_SHAPE, nd, ADAM_AMP, None))
    steps = 4 * ZERO_SHAPE.tensors  # Adam's float32 step, one a tensor, on every rank that holds it
    # Baseline (ddp): weights 4 + gradients 4 + Adam 8 bytes a parameter, all on every rank.
    assert plans["ddp"].devices[0].state == 16 * psi + steps
    # ZeRO-1: weights and gradients whole, Adam's 8 bytes sharded: 8 psi + 8 psi / Nd (whole
    # tensors dealt out, so a rank's share is within one tensor of the even split).
    zero1 = [d.optimizer for d in plans["zero1"].devices]
    assert sum(zero1) == 8 * psi + steps
    largest = 4 * 4096 * 4 * 4096 * 2  # fc1's weight, Adam's two buffers
    assert all(abs(o - 8 * psi / nd) <= largest for o in zero1)
    assert plans["zero1"].devices[0].params + plans["zero1"].devices[0].grads == 8 * psi
    # ZeRO-3 (fsdp) and the no-reshard FSDP at rest: everything sharded, 16 psi / Nd.
    for mode in ("fsdp", "fsdp_grad_op"):
        rank0 = plans[mode].devices[0]
        assert rank0.state == pytest.approx(16 * psi / nd, rel=2e-3)
        assert rank0.at_rest == rank0.state
    # The no-reshard FSDP as backward begins: every weight gathered whole (4 psi) beside the shards.
    grad_op = plans["fsdp_grad_op"].devices[0]
    assert grad_op.buffers >= 4 * psi and grad_op.peak_moment == "unit_backward"
    # Autocast's bf16/fp16 copies of every matmul weight, whole under FSDP: about 2 psi.
    assert plans["fsdp"].devices[0].amp_copies == pytest.approx(2 * psi, rel=0.03)
    assert (
        plan_mode("fsdp", ZERO_SHAPE, nd, Training(optimizer="adam", batch_size=64)).devices[0].amp_copies
        == 0
    )


def test_each_figure_names_its_moment():
    # A big model and a small batch: the state outweighs the activations, so ddp peaks as backward ends.
    ddp = by_mode(plan(ZERO_SHAPE, 64, ADAM_AMP, None))["ddp"].devices[0]
    assert ddp.peak_moment == "backward_ends" and ddp.total == ddp.at_rest == ddp.state + ddp.buffers
    # A big batch: as backward begins, with no gradient yet but the loss's.
    tiny = plan_mode("ddp", MODELS["gpt-tiny"], 2, Training(batch_size=64)).devices[0]
    assert tiny.peak_moment == "backward_begins"
    assert tiny.total == tiny.params + tiny.optimizer + tiny.activations + tiny.loss_grads + tiny.buffers
    # With accumulation the earlier micro-batches' gradients are there too.
    accum = plan_mode("ddp", MODELS["gpt-tiny"], 2, Training(batch_size=64, accum=2)).devices[0]
    assert accum.backward_begins == tiny.backward_begins + tiny.grads


def test_gpt_two_small_has_its_124m_parameters_with_the_head_tied_and_163m_untied():
    small = MODELS["gpt-125m"]
    assert small.tied_head and small.params == 124_439_808
    untied = model_shape("gpt-125m", untied_head=1)
    assert untied.params == 163_037_184 and untied.params - small.params == 50257 * 768
    assert MODELS["gpt-350m"].params == 354_823_168 and MODELS["gpt-1.3b"].params == 1_315_723_264
    # Modes that put the embeddings and the head apart say why they cannot, and what to add.
    assert plan_mode("pipeline", small, 4, Training()).note.endswith("add --untied-head.")
    assert plan_mode("pipeline", untied, 4, Training()).devices
    # Whole-model modes hold the one matrix once.
    assert plan_mode("single", small, 1, Training()).devices[0].params == 4 * small.params


def test_plan_on_the_command_line(capsys):
    code, out, _ = cli_in_process(
        capsys, "plan", "--model", "gpt-7b", "--gpus", "8", "--gpu-mem", "80", "--optimizer", "adam", "--json"
    )
    assert code == 0
    document = json.loads(out)
    fits = {m["mode"]: m["fits"] for m in document["modes"]}
    assert fits["ddp"] is False and fits["fsdp"] is True
    fsdp = next(m for m in document["modes"] if m["mode"] == "fsdp")
    assert set(fsdp["devices"][0]) >= {"params", "grads", "optimizer", "activations", "buffers", "total"}
    assert {"amp_copies", "at_rest", "peak_moment"} <= set(fsdp["devices"][0]) and "backward_begins" in fsdp[
        "moments"
    ]
    assert document["bytes_per_parameter"] == {
        "weights": 4,
        "gradients": 4,
        "optimizer": 8,
        "master_weights": 0,
        "amp_copy": 0,
    }
    code, out, _ = cli_in_process(capsys, "plan", "--model", "gpt-1.3b", "--gpus", "8", "--gpu-mem", "80")
    assert code == 0 and [line.split()[-1] for line in out.splitlines() if line.startswith("ddp ")] == ["yes"]


def test_plan_without_a_gpu_or_with_a_bad_model_is_one_sentence(capsys):
    code, _, err = cli_in_process(capsys, "plan", "--model", "gpt-tiny")
    assert code == 2 and "say how many to plan for with --gpus N" in err
    code, _, err = cli_in_process(capsys, "plan", "--model", "gpt-9", "--gpus", "2")
    assert code == 2 and "unknown model 'gpt-9'" in err


def test_a_variant_asked_for_by_its_flags_is_planned_as_its_own_mode():
    from mgpu_tui.engine.planning.modes import MODES, variant

    fsdp = MODES["fsdp"]
    assert variant(fsdp, ["--seed", "1", "--no-reshard-after-forward"]) is MODES["fsdp_grad_op"]
    assert variant(fsdp, ["--reshard-after-forward"]) is fsdp and variant(fsdp, []) is fsdp
    assert variant(MODES["ddp"], ["--no-reshard-after-forward"]) is MODES["ddp"]
