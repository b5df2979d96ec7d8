"""Issue 42: TF/s and MFU for any script, its steps' FLOPs counted by torch's own counter on a fake
replay (engine/rank/watch/flops/), on real torchrun ranks over gloo; and a LightningModule, which
is never replayed (make test-frameworks, where Lightning is installed)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import results_of, run_cli, summary_from
from mgpu_tui.engine.rank.watch import flops
from mgpu_tui.reports.run_summary import summary_text

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def dropin(tmp_path: Path, script: str, *args: str, nproc: int = 1):
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


def test_a_compiled_script_is_counted_as_torchs_counter_counts_it_and_stays_compiled(tmp_path):
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
    # Every step ran the compiled graph, the steps after the count too: as many runs as bare.
    assert watched["compiled_runs"] == alone["compiled_runs"] >= watched["steps"]
    assert [e["flops"] for e in steps[0]] == [watched["flops"]] * watched["steps"]
    assert summary.compute.tflops > 0 and summary.compute.mfu is None
    assert summary.compute.note == "the CPU has no peak in the table"


def test_a_nanogpt_shaped_script_on_two_ranks_shows_its_tflops_and_why_mfu_is_na(tmp_path):
    # 2 layers, width 64, 32 tokens, vocabulary 256, untied head; 4 micro-batches of 4, 2 a rank.
    summary, steps, _ = dropin(
        tmp_path,
        str(SCRIPTS / "gpt_train.py"),
        "--max-iters",
        "12",
        "--grad-accum",
        "4",
        "--out-dir",
        str(tmp_path / "out"),
        nproc=2,
    )
    layers, d, seq, vocab = 2, 64, 32, 256
    per_token = 6 * (layers * 12 * d * d + d * vocab) + 14 * layers * d * seq  # as the counter counts
    for rank in (0, 1):
        assert [e["flops"] for e in steps[rank]] == [per_token * 4 * seq * 2] * 12
    text = summary_text(summary)
    assert "TFLOP/s (torch's FLOP count of each step), MFU n/a: the CPU has no peak in the table" in text
    assert len([r for r in summary.ranks if r.compute and r.compute.tflops]) == 2
    assert summary.compute.tflops == sum(r.compute.tflops for r in summary.ranks)


def test_a_lightning_module_is_never_replayed_and_says_why():
    import lightning  # installed for make test-frameworks alone; make test collects this file too

    class Module(lightning.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Linear(4, 1)

    with pytest.raises(flops.NotCounted, match="Lightning calls training_step"):
        flops.eager_module(torch, Module())


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
    """Each shape's count equals torch's counter on a real step. Without a mask the meta replay
    agrees and counts the later shapes; with one, today's transformers read the mask's values
    (which a meta tensor has not), and the rank stays on the fake replay: the count is exact either
    way."""
    import contextlib

    from torch.utils.flop_counter import FlopCounterMode

    flops.register_missing_formulas(torch)
    for name, model in hugging_face_models():
        counted = flops.StepFlops(torch)
        for batch in (2, 3):
            ids = torch.randint(0, 500, (batch, 32))
            inputs = {"input_ids": ids, "labels": ids}
            if padded:
                inputs["attention_mask"] = (torch.arange(32) < 24).long().expand(batch, 32)
            counted.seen(model, (), inputs)
            total = counted.total(contextlib.nullcontext)
            with FlopCounterMode(display=False) as real:
                model(**inputs).loss.backward()
            model.zero_grad(set_to_none=True)
            assert total == real.get_total_flops(), (name, batch)
            assert counted.note is None and (padded or counted.on_meta), name
