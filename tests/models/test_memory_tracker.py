"""The memory planner against torch's own trackers: MemTracker for ddp, FSDPMemTracker for fsdp,
on 2 CPU ranks, the custom GPT of 21M parameters at two batch sizes (memory_tracker_ranks.py).

At each moment the planner names, its figures are torch's: parameters, gradients and optimizer
state to the byte, the totals after forward and at the peak within 10% (the activations are an
estimate), and at rest (after backward, after the optimizer step) exact but for DDP's buckets,
which the tracker files as activations."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import once_per_session
from mgpu_tui.engine.planning.memory import Training, plan_mode

HERE = Path(__file__).parent
BATCHES = (8, 16)


@pytest.fixture(scope="module")
def tracked(tmp_path_factory) -> dict:
    def track(folder: Path) -> dict:
        out = folder / "figures.json"
        argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
        argv += [str(HERE / "memory_tracker_ranks.py"), str(out), *map(str, BATCHES)]
        result = subprocess.run(argv, capture_output=True, text=True, timeout=240, cwd=folder)
        assert result.returncode == 0, result.stderr[-4000:]
        return json.loads(out.read_text())

    return once_per_session(tmp_path_factory, "tracker", track)


@pytest.mark.parametrize("mode", ["ddp", "fsdp"])
@pytest.mark.parametrize("batch", BATCHES)
def test_the_plan_is_torchs_tracker_at_each_moment_within_ten_percent(tracked, mode, batch):
    sys.path.insert(0, str(HERE))
    from memory_tracker_ranks import SHAPE

    figures = tracked[f"{mode} {batch}"]
    planned = plan_mode(mode, SHAPE, 2, Training(batch_size=batch)).devices[0]
    param, grad, opt = (
        ("Parameter", "Gradient", "Optstate")
        if mode == "ddp"
        else (
            "Sharded Param",
            "Sharded Grad",
            "OptState",
        )
    )
    forward, backward, step = (
        figures["moments"][k] for k in ("after_forward", "after_backward", "after_step")
    )
    # The state, to the byte: parameters throughout, no gradient after forward (zero_grad set
    # them to None), every gradient after backward, and the optimizer's momentum.
    assert forward[param] == backward[param] == step[param] == planned.params
    assert forward.get(grad, 0) == 0 and backward[grad] == step[grad] == planned.grads
    assert forward[opt] == step[opt] == planned.optimizer
    # At rest: the state and the buffers that stay (DDP's buckets, which the tracker saw made in
    # the second step's forward and counts as activations).
    assert step["Total"] == pytest.approx(planned.at_rest, rel=0.01)
    # After forward: every activation kept; at the peak, as backward begins (for FSDP, the unit
    # it gathers for the head's backward comes just after the loss's gradients: the plan adds both).
    assert forward["Total"] == pytest.approx(planned.after_forward, rel=0.1)
    assert figures["peak"]["Total"] == pytest.approx(planned.total, rel=0.1)
    assert planned.total >= figures["peak"]["Total"]  # what the plan says fits, fits
