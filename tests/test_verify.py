"""The verifier itself: it must catch parameters that differ from the baseline."""

import json
import subprocess
import sys

import torch

from mgpu_tui.demos.verify import compare

BASE = {"0.fc1.weight": torch.ones(4, 4), "1.weight": torch.full((2,), 2.0)}


def test_equal_parameters_pass_and_a_difference_fails():
    assert compare({k: v.clone() for k, v in BASE.items()}, BASE, 1e-5)["ok"]
    moved = {k: v.clone() for k, v in BASE.items()}
    moved["1.weight"][0] += 1e-3
    result = compare(moved, BASE, 1e-5)
    assert not result["ok"]
    assert abs(result["max_abs_diff"] - 1e-3) < 1e-6
    assert abs(result["max_rel_diff"] - 5e-4) < 1e-6


def test_missing_or_misshapen_parameters_fail():
    assert compare({"0.fc1.weight": BASE["0.fc1.weight"]}, BASE, 1.0)["missing"] == ["1.weight"]
    odd = {"0.fc1.weight": torch.ones(4, 2), "1.weight": BASE["1.weight"]}
    assert not compare(odd, BASE, 1.0)["ok"]


def test_verify_run_catches_a_model_trained_differently(tmp_path):
    """Train the baseline with another learning rate; verifying it against lr 0.02 must fail."""
    params = tmp_path / "params"
    done = subprocess.run([sys.executable, "-m", "mgpu_tui.demos.single", "--steps", "4", "--device", "cpu",
                           "--lr", "0.03", "--save-params", str(params)], capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr
    check = subprocess.run([sys.executable, "-m", "mgpu_tui.demos.verify", "--params-dir", str(params),
                            "--steps", "4", "--device", "cpu"], capture_output=True, text=True, timeout=120)
    result = json.loads(check.stdout.strip().splitlines()[-1])
    assert result["ok"] is False and result["max_abs_diff"] > 1e-4
