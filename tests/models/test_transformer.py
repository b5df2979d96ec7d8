"""The transformer workload (--model gpt-tiny): every mode trains the same GPT, its figures are
tokens and FLOPs, and the memory planner's prediction is what each rank really holds."""

from __future__ import annotations

import json

import pytest

from conftest import run_cli, summary_from
from mgpu_tui.engine.planning.memory import layers_of
from mgpu_tui.engine.planning.shapes import MODELS


def test_the_demos_gpt_has_the_planners_parameters_tensor_by_tensor():
    from mgpu_tui.demos.transformer import build_gpt

    for name in ("gpt-tiny", "gpt-125m"):
        shape = MODELS[name]
        real = [p.numel() for p in build_gpt(shape).parameters()]
        planned = [t.numel for layer in layers_of(shape) for t in layer.tensors]
        assert real == planned and sum(real) == shape.params


def compare_on_cpu(tmp_path, *args: str, steps: int) -> tuple[list[dict], str]:
    """`compare ARGS` on 2 CPU ranks for ``steps`` steps, which must succeed: its rows and output."""
    out = tmp_path / "r.json"
    ours = ("--nproc", "2", "--steps", str(steps), "--device", "cpu", "--out", str(out))
    result = run_cli("compare", *args, *ours, "--run-dir", str(tmp_path / "runs"), timeout=240)
    assert result.returncode == 0, result.stderr
    return json.loads(out.read_text())["rows"], result.stdout


def test_compare_of_four_modes_on_gpt_tiny_gives_tokens_flops_equal_losses_and_predicted_memory(tmp_path):
    # ddp and fsdp are held to torch's own trackers in test_memory_tracker.py; here the two ZeRO
    # stages between them, and the modes that split the model.
    rows, printed = compare_on_cpu(
        tmp_path, "zero1", "fsdp_grad_op", "tp", "pipeline", "--model", "gpt-tiny", steps=10
    )
    assert [r["mode"] for r in rows] == ["zero1", "fsdp_grad_op", "tp", "pipeline"]
    seq_len = MODELS["gpt-tiny"].seq_len
    for r in rows:
        assert r["status"] == "ok"
        # tokens/s: samples/s of sequences of seq_len tokens, counted over the same steps.
        assert r["tokens_per_s"] == pytest.approx(r["samples_per_s"] * seq_len, rel=1e-6)
        assert r["tokens_per_s_per_device"] == pytest.approx(r["tokens_per_s"] / 2)
        flops = MODELS["gpt-tiny"].flops_per_token * seq_len
        assert r["tflops_per_device"] == pytest.approx(r["samples_per_s_per_device"] * flops / 1e12)
        assert r["mfu"] is None  # no GPU: no peak to compare with, so no MFU
        # The planner's state of each rank, to the byte, is what the rank summed over its own tensors.
        assert len(r["memory"]) == 2
        for m in r["memory"]:
            assert m["predicted_state_bytes"] == m["measured_state_bytes"] > 0
            # The peak of the live tensors (torch's MemTracker, on the CPU) is the predicted one
            # within 10%; the process's resident set holds the runtime besides (docs/compare.md).
            if r["mode"] == "pipeline":  # its schedule's autograd.grad is beyond MemTracker
                assert m["tensor_peak_bytes"] is None
            else:
                assert m["tensor_peak_bytes"] == pytest.approx(m["predicted_total_bytes"], rel=0.1)
                assert m["peak_bytes"] > m["tensor_peak_bytes"]
    losses = [r["final_loss"] for r in rows]
    assert max(losses) - min(losses) < 1e-4  # the same function trained: float32 on the CPU
    assert "state/rank" in printed and "=" in printed


def test_tensor_parallel_gpt_in_the_megatron_pattern_equals_the_single_device_baseline(tmp_path):
    result = run_cli(
        "run",
        "tp",
        "--model",
        "gpt-tiny",
        "--nproc",
        "2",
        "--steps",
        "8",
        "--device",
        "cpu",
        "--verify",
        "--run-dir",
        str(tmp_path),
        "--json",
        timeout=180,
    )
    assert result.returncode == 0, result.stderr
    summary = summary_from(result.stdout)
    assert summary.verify.ok and summary.verify.max_abs_diff <= 1e-5
    assert (
        summary.tokens_per_s
        and summary.memory[0].measured_state_bytes == summary.memory[0].predicted_state_bytes
    )


def test_a_gpt_shape_that_cannot_be_is_one_sentence(tmp_path):
    result = run_cli(
        "run",
        "tp",
        "--model",
        "gpt-tiny",
        "--nproc",
        "3",
        "--batch-size",
        "63",
        "--device",
        "cpu",
        "--run-dir",
        str(tmp_path),
    )
    assert result.returncode == 2
    assert result.stderr.strip().endswith("the model's 4 heads must be a multiple of --nproc.")
    result = run_cli("run", "ddp", "--heads", "8", "--device", "cpu", "--run-dir", str(tmp_path))
    assert result.returncode == 2 and "shape a GPT: add --model gpt-tiny" in result.stderr


def test_a_head_tied_to_the_embeddings_stays_one_matrix_under_fsdp_and_tp(tmp_path):
    # gpt-125m's head is tied (GPT-2's 124M); shrunk to gpt-tiny's size, it stays tied.
    shape = ["--model", "gpt-125m", "--layers", "2", "--d-model", "64", "--heads", "4", "--seq-len", "32"]
    rows, _ = compare_on_cpu(tmp_path, "fsdp", "tp", *shape, "--vocab", "256", steps=6)
    for r in rows:
        # One matrix, as the plan counts it: a head with a copy of its own would hold 256 x 64 more.
        assert all(m["predicted_state_bytes"] == m["measured_state_bytes"] for m in r["memory"]), r["mode"]
    assert abs(rows[0]["final_loss"] - rows[1]["final_loss"]) < 1e-4
    # The modes that put the head and the embeddings apart say what to add.
    refused = run_cli("run", "pipeline", *shape, "--device", "cpu", "--run-dir", str(tmp_path / "runs"))
    assert refused.returncode == 2 and refused.stderr.strip().endswith(
        "puts them on different stages: add --untied-head."
    )
