"""Modes run for real through `mgpu-tui run --verify` on CPU ranks, against the single-device baseline.

Each case must exit 0 with status ok and verify.ok, and leave nothing running.
float32 runs must match within 1e-5, AMP runs (bf16 on the CPU) within 2e-3
(see demos/verify.py). These cases cover the training variants the check does not
(AMP, accumulation, 1F1B); the one-process path is verified in tests/test_bad_input.py;
every one of the modes is verified in tests/test_check.py, where `--check
--level 3` runs them all in one launch (a launch costs seconds here, and the
suite has five minutes).
"""

import json
import subprocess
import sys

import pytest

from conftest import live_processes_of, only_run_dir, run_cli, summary_from

# fsdp --amp: autocast, as in every mode (FSDP's own parameter dtype trains another function).
TWO_RANKS = [["pipeline", "--schedule", "1f1b"], ["ddp", "--amp"], ["fsdp", "--accum", "2", "--amp"]]
DEGENERATE_ON_CPU = {"dp", "mp", "hybrid", "ddp_mp"}


def run_verified(args, runs_root):
    result = run_cli(
        "run",
        *args,
        "--steps",
        "8",
        "--device",
        "cpu",
        "--verify",
        "--json",
        "--run-dir",
        str(runs_root),
        timeout=180,
    )
    assert result.returncode == 0, result.stderr
    summary = summary_from(result.stdout)
    assert summary.status == "ok" and summary.steps == 8
    verify = summary.verify
    assert verify.ok and verify.compared == 18 and not verify.missing, verify
    assert verify.tolerance == (2e-3 if "--amp" in args else 1e-5)
    assert live_processes_of(only_run_dir(runs_root)) == []
    return summary


@pytest.mark.parametrize("args", TWO_RANKS, ids=" ".join)
def test_two_rank_mode_equals_the_baseline(args, runs_root):
    summary = run_verified([*args, "--nproc", "2"], runs_root)
    assert summary.world_size == 2
    assert (summary.note is not None) == (args[0] in DEGENERATE_ON_CPU)
    rates = [r.samples_per_s for r in summary.ranks]
    if args[0] in ("tp", "pipeline"):
        # Each sample counts once: TP peers and later pipeline stages count none, so have no rate.
        assert rates[0] > 0 and rates[1] is None
        assert summary.samples_per_s == pytest.approx(rates[0])
    elif args[0] == "rpc":
        assert summary.ranks[1].last_step == 0  # the remote rank only answers calls
    else:
        assert all(r > 0 for r in rates)
    # Every mode trains the same function, so the global-batch loss is the same.
    assert summary.final_loss == pytest.approx(2.2756, abs=2e-3)


def test_list_names_all_twelve_modes_and_labels_the_degenerate_ones():
    modes = {m["name"]: m for m in json.loads(run_cli("list", "--json").stdout)["modes"]}
    assert set(modes) == {
        "single",
        "dp",
        "ddp",
        "zero1",
        "mp",
        "ddp_mp",
        "pipeline",
        "fsdp",
        "fsdp_grad_op",
        "rpc",
        "tp",
        "hybrid",
    }
    for name, mode in modes.items():
        assert mode["runnable"]
        assert ("degenerate" in mode["reason"]) == (name in DEGENERATE_ON_CPU), mode


def test_mode_options_are_refused_for_other_modes(runs_root):
    result = run_cli("run", "ddp", "--schedule", "1f1b", "--run-dir", str(runs_root))
    assert result.returncode == 2 and "--schedule applies to mode pipeline only" in result.stderr


TP_ON_CUDA_DEFAULTS = """
import torch, torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor
from mgpu_tui.demos import harness, tp
dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
args = harness.parse_args("tp", argv=["--device", "cpu"])
model = tp.tensor_parallel(harness.build_model(args), init_device_mesh("cpu", (1,)))
assert all(isinstance(p, DTensor) for p in model.parameters())
optimizer = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9, foreach=True)
scaler = torch.amp.GradScaler("cpu", enabled=True)
x, y = harness.SyntheticTask(args).batch(1, 8)
for _ in range(2):
    optimizer.zero_grad()
    scaler.scale(torch.nn.functional.cross_entropy(model(x), y)).backward()
    scaler.step(optimizer)
    scaler.update()
dist.destroy_process_group()
print("stepped")
"""


def test_tp_steps_with_the_fused_optimizer_and_grad_scaler_that_cuda_uses():
    # On CUDA the optimizer is fused (foreach) and fp16 brings a GradScaler: both refused the
    # classifier head as a plain tensor beside the DTensors (seen on an H100, one rank). Forced
    # on here, in one process with a group of one.
    done = subprocess.run(
        [sys.executable, "-c", TP_ON_CUDA_DEFAULTS], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and "stepped" in done.stdout, done.stderr[-2000:]
