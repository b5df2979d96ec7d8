"""The verifier itself: it must catch parameters that differ from the baseline."""

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
