"""Issues 42 and 54: TF/s and MFU for any script, its steps' FLOPs counted as they run, by torch's
FLOP formulas (engine/rank/watch/flops/), on real torchrun ranks over gloo; compiled scripts left
compiled (a counting backend, and inductor's graphs counted from what they declare); Hugging Face
models against torch's own counter (make test-frameworks, where transformers is installed)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import results_of, run_cli, summary_from
from frameworks_helpers import BIN, deepspeed_cpu, free_port, run_exec
from frameworks_helpers import SCRIPTS as FRAMEWORK_SCRIPTS
from mgpu_tui.reports.run_summary import summary_text
from watched_steps import Watched, torchs_count

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def dropin(tmp_path: Path, script: str, *args: str, nproc: int = 1, env: dict | None = None):
    done = run_cli(
        "torchrun",
        "--nproc-per-node",
        str(nproc),
        "--json",
        "--run-dir",
        str(tmp_path / "runs"),
        script,
        *args,
        timeout=240,
        env={**os.environ, **(env or {})},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    summary = summary_from(done.stdout)
    steps = {}
    for rank in range(nproc):
        lines = (Path(summary.run_dir) / "events" / f"rank{rank}.jsonl").read_text().splitlines()
        steps[rank] = [e for e in map(json.loads, lines) if e["kind"] == "step"]
    return summary, steps, done


def test_a_plain_mlp_script_is_counted_exactly_as_torchs_counter_counts_its_step(tmp_path):
    summary, steps, done = dropin(tmp_path, str(SCRIPTS / "compiled_mlp.py"), "--eager")
    own = results_of(done.stdout + done.stderr)[0]
    assert [e["flops"] for e in steps[0]] == [own["flops"]] * own["steps"]
    assert own["flops"] == 16 * (32 * 64 + 64 * 8) * 2 * 3 - 16 * 32 * 64 * 2  # no input gradient at layer 1


def test_a_compiled_script_stays_compiled_at_every_step_and_is_counted_as_it_runs(tmp_path):
    """Issue 54: under a dispatch mode Dynamo skips a compiled frame, and the skip sticks. The count's
    mode leaves it compiled: over 50 steps the compiled graph runs at each step as often as bare,
    the counted (observed) step too; a backend that runs its graph's operations is counted as the
    eager step is."""
    script = str(SCRIPTS / "compiled_mlp.py")
    bare = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "1", script],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=tmp_path,
    )
    assert bare.returncode == 0, bare.stderr[-2000:]
    summary, steps, done = dropin(tmp_path, script)
    watched, alone = results_of(done.stdout + done.stderr)[0], results_of(bare.stdout)[0]
    assert watched["compiled_runs"] == alone["compiled_runs"] and len(alone["compiled_runs"]) == 50
    assert all(runs >= 1 for runs in watched["compiled_runs"])
    # The first step compiled inside its window (DDP's graph splitter compiles with every mode still
    # open): counted again at the second, once compiled, and never again.
    assert [e.get("flops") for e in steps[0]] == [None] + [watched["flops"]] * 49
    assert [e.get("observed", False) for e in steps[0]] == [True, True] + [False] * 48
    assert summary.compute.tflops > 0 and summary.compute.mfu is None
    assert summary.compute.note == "the CPU has no peak in the table"


@pytest.mark.timeout(480)  # inductor compiles C++ for the first run (a minute or more on 2 busy cores)
def test_an_inductor_compiled_script_is_counted_from_what_its_graphs_declare_cached_or_not(tmp_path):
    """Inductor's kernels run outside torch's dispatcher: each graph is counted from its post-grad
    text, fresh from the compiler and again from inductor's cache (a second run of the job)."""
    script = str(SCRIPTS / "compiled_mlp.py")
    cache = {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    for run in ("compiled", "from the cache"):
        line = ("--backend", "inductor", "--steps", "12")
        summary, steps, done = dropin(tmp_path / run, script, *line, env=cache)
        own = results_of(done.stdout + done.stderr)[0]
        assert [e.get("flops") for e in steps[0]] == [None] + [own["flops"]] * 11, run
        assert summary.compute.tflops > 0, (run, summary.compute)


def test_a_nanogpt_shaped_script_is_counted_within_3_percent_of_nanogpts_own_estimate(tmp_path):
    """A nanoGPT-shaped script (its head tied to the token embeddings, as nanoGPT's is) on 2 ranks:
    each step's count is the GPT demos' analytic count exactly (6 per matrix weight a token, and
    attention's 14 L d s), and within 3% of nanoGPT's own estimate_mfu FLOPs (6N + 12 L d s, N every
    parameter but the position embeddings). The difference is exact too: nanoGPT's N also counts
    the biases and LayerNorms (13 d a layer, 2 d at the end), which multiply no matrix, and it takes
    attention's backward at twice its forward (12), where torch counts the fused kernel's backward
    at 2.5 times (14): the scores are computed again."""
    summary, steps, done = dropin(
        tmp_path,
        str(SCRIPTS / "gpt_train.py"),
        *("--max-iters", "12", "--grad-accum", "4", "--tie-head", "--out-dir", str(tmp_path / "out")),
        nproc=2,
    )
    layers, d, seq, vocab = 2, 64, 32, 256
    tokens = 4 * seq * 2  # a micro-batch of 4 sequences, 2 micro-batches a rank
    per_token = 6 * (layers * 12 * d * d + d * vocab) + 14 * layers * d * seq  # as the counter counts
    for rank in (0, 1):
        assert [e["flops"] for e in steps[rank]] == [per_token * tokens] * 12
    estimate = results_of(done.stdout + done.stderr)[0]["estimate_flops_per_iter"]
    assert abs(per_token * tokens - estimate) <= 0.03 * estimate, (per_token * tokens, estimate)
    not_matmul, attention = 6 * (layers * 13 * d + 2 * d), 2 * layers * d * seq
    assert per_token * tokens == estimate + (attention - not_matmul) * tokens
    text = summary_text(summary)
    assert "TFLOP/s (torch's FLOP count of each step), MFU n/a: the CPU has no peak in the table" in text
    assert len([r for r in summary.ranks if r.compute and r.compute.tflops]) == 2
    assert summary.compute.tflops == sum(r.compute.tflops for r in summary.ranks)


def test_each_tensor_parallel_rank_counts_its_shards_compute(tmp_path):
    """DTensor's operations run on each rank's shards: the count (which lets a tensor subclass run
    its operation and counts the local ones) gives each rank half the MLP's step, exactly."""
    summary, steps, _ = dropin(tmp_path, str(SCRIPTS / "tp_train.py"), nproc=2)
    forward = 2 * 16 * (32 * 128 + 128 * 32)
    whole = 2 * forward + 2 * 16 * 128 * 32  # the weights' gradients, and the second layer's input's
    for rank in (0, 1):  # the first step's model is found as it steps (no DDP): counted from the second
        assert [e.get("flops") for e in steps[rank]] == [None] + [whole // 2] * 7
    assert summary.compute.tflops > 0


@pytest.mark.timeout(900)  # a hang guard: DeepSpeed's op build takes minutes on a loaded machine
def test_a_zero3_deepspeed_job_counts_each_ranks_whole_compute_from_its_first_step(tmp_path, deepspeed_cpu):
    """ZeRO-3 partitions the parameters and gathers each layer's for its forward and backward: each
    rank computes the whole model on its own batch, and its count is that, exactly; DeepSpeed's
    engine is the root from its construction, so the first step is counted too."""
    launch = [str(BIN / "deepspeed"), "--num_gpus", "2", "--master_port", free_port(),
              str(FRAMEWORK_SCRIPTS / "deepspeed_train.py"), "--zero-stage", "3"]  # fmt: skip
    done, run_dir = run_exec(tmp_path, *launch, env=deepspeed_cpu, timeout=900)
    summary = summary_from(done.stdout)
    assert summary.status == "ok" and summary.steps == 8, done.stderr[-4000:]
    forward = 2 * 4 * (16 * 32 + 32 * 1)  # a batch of 4 through Linear(16, 32) and Linear(32, 1)
    whole = 3 * forward - 2 * 4 * 16 * 32  # backward twice the forward, but no input gradient at layer 1
    for rank in (0, 1):
        lines = (run_dir / "events" / f"rank{rank}.jsonl").read_text().splitlines()
        assert [e.get("flops") for e in map(json.loads, lines) if e["kind"] == "step"] == [whole] * 8
    assert summary.compute.tflops > 0


__all__ = ["deepspeed_cpu"]  # a fixture, used by name


def hugging_face_models():
    """Small models of three Hugging Face families, as their own classes build them: GPT-2, Llama
    (grouped-query attention, rotary embeddings) and BERT, each through scaled-dot-product attention."""
    from transformers import (
        BertConfig,
        BertForMaskedLM,
        GPT2Config,
        GPT2LMHeadModel,
        LlamaConfig,
        LlamaForCausalLM,
    )

    yield "gpt2", GPT2LMHeadModel(GPT2Config(n_layer=3, n_embd=64, n_head=4, vocab_size=500, n_positions=64))
    sizes = {
        "num_hidden_layers": 3,
        "hidden_size": 64,
        "num_attention_heads": 4,
        "intermediate_size": 128,
        "vocab_size": 500,
        "max_position_embeddings": 64,
    }
    yield "llama", LlamaForCausalLM(LlamaConfig(**sizes, num_key_value_heads=2))
    yield "bert", BertForMaskedLM(BertConfig(**sizes))


@pytest.mark.parametrize("padded", [False, True], ids=["no mask", "a padding mask"])
def test_hugging_face_models_are_counted_as_torchs_counter_counts_their_real_steps(padded):
    """Each shape's count, observed as the step runs, equals torch's counter on the same step, mask
    or not (a mask's values, which the old replay's meta tensors lacked, are simply there)."""
    for name, model in hugging_face_models():
        watched = Watched(model)
        for batch in (2, 3, 2):
            ids = torch.randint(0, 500, (batch, 32))
            inputs = {"input_ids": ids, "labels": ids}
            if padded:
                inputs["attention_mask"] = (torch.arange(32) < 24).long().expand(batch, 32)
            counted = watched.step(loss_of=lambda out: out.loss, **inputs)
            assert counted.flops == torchs_count(model, loss_of=lambda out: out.loss, **inputs), (name, batch)
            assert watched.counted.note is None, name
