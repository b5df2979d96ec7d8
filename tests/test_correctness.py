"""Every mode must train the same function as the single-device baseline.

Same seed, same data, same global batch: after K steps the parameters must
match the baseline's. On float32 CPU the only difference is the order of
floating-point additions (two half-batch means averaged by the all-reduce,
against one full-batch mean), so the bound is tight: 1e-6 absolute.
"""

import pytest
import torch

from conftest import run_cli

STEPS = 20
TOLERANCE = 1e-6


def train(mode, tmp_path, *extra, nproc=None):
    params = tmp_path / f"{mode}{'-'.join(extra)}.pt"
    args = ["run", mode, "--steps", str(STEPS), "--batch-size", "64", "--device", "cpu",
            "--run-dir", str(tmp_path / "runs")]
    if nproc:
        args += ["--nproc", str(nproc)]
    result = run_cli(*args, "--", "--save-params", str(params), *extra)
    assert result.returncode == 0, result.stderr
    return torch.load(params)


@pytest.fixture(scope="module")
def baseline(tmp_path_factory):
    return train("single", tmp_path_factory.mktemp("single"))


def max_abs_diff(a, b):
    assert a.keys() == b.keys()
    return max((a[k] - b[k]).abs().max().item() for k in a)


def test_baseline_actually_trained(baseline, tmp_path):
    initial = train("single", tmp_path, "--lr", "0")
    assert max_abs_diff(baseline, initial) > 1e-3


def test_ddp_two_ranks_equals_baseline(baseline, tmp_path):
    assert max_abs_diff(train("ddp", tmp_path, nproc=2), baseline) <= TOLERANCE


def test_ddp_with_gradient_accumulation_equals_baseline(baseline, tmp_path):
    assert max_abs_diff(train("ddp", tmp_path, "--accum", "2", nproc=2), baseline) <= TOLERANCE
