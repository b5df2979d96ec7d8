"""Issue 42: TF/s and MFU from the ranks' counted FLOPs (engine/run/figures/mfu.py), and how the console says
them (reports/anatomy.py's compute_line)."""

import math

from mgpu_tui.engine.protocol.events import About
from mgpu_tui.engine.run.figures import mfu
from mgpu_tui.reports.anatomy import compute_line


def about(device="cuda:0", name="NVIDIA H200", precision="bf16", note=None):
    return About(0, 0.0, device, None, "nccl", precision=precision, device_name=name, flops_note=note)


def test_a_ranks_tflops_are_its_steps_flops_over_their_seconds_and_mfu_against_its_gpus_peak():
    figures = mfu.of_rank([2e12, 2e12, 2e12], [0.01, 0.01, 0.02], about())
    assert figures.tflops == 6e12 / 0.04 / 1e12 == 150.0
    assert figures.mfu == 150e12 / 989.5e12 and figures.basis == "H200 SXM bf16" and figures.note is None
    line = compute_line(figures)
    assert line == (
        "compute 150 TFLOP/s (torch's FLOP count of each step), "
        "MFU 15.2% of 989.5 TFLOP/s (H200 SXM bf16 dense peak)"
    )


def test_mfu_is_na_with_the_reason_where_there_is_no_peak_or_no_count():
    cpu = mfu.of_rank([1e9, 1e9], [0.5, 0.5], about(device="cpu", name=None, precision="fp32"))
    assert cpu.tflops == 0.002 and cpu.mfu is None and cpu.note == "the CPU has no peak in the table"
    unknown = mfu.of_rank([1e9], [1.0], about(name="NVIDIA H800"))
    assert unknown.mfu is None and "not in the table" in unknown.note
    sharded = mfu.of_rank([math.nan, math.nan], [1.0, 1.0], about(note="FSDP holds shards of the parameters"))
    assert sharded.tflops is None and sharded.note == "FSDP holds shards of the parameters"
    assert compute_line(sharded) == "compute n/a: FSDP holds shards of the parameters"


def test_the_jobs_figures_add_the_ranks_and_are_na_unless_every_rank_has_them():
    a = mfu.of_rank([1e12], [0.01], about())
    b = mfu.of_rank([1e12], [0.02], about())
    job = mfu.of_job([a, b])
    assert job.tflops == 150.0 and job.mfu == 150e12 / (2 * 989.5e12) and job.basis == "H200 SXM bf16"
    assert "of 2 x 989.5 TFLOP/s" in compute_line(job, 2)
    cpu = mfu.of_rank([1e12], [1.0], about(device="cpu", name=None, precision="fp32"))
    mixed = mfu.of_job([a, cpu])
    assert mixed.tflops == 101.0 and mixed.mfu is None and mixed.note == "the CPU has no peak in the table"


def test_recomputed_activations_are_hfus_and_mfu_leaves_them_out():
    """Issue 54: what checkpointing ran again is counted apart; MFU is the model's FLOPs alone."""
    figures = mfu.of_rank([2e12, 2e12], [0.01, 0.01], about(), recomputed=[1e12, 1e12])
    assert figures.tflops == 200.0 and figures.recomputed_tflops == 100.0
    assert figures.mfu == 200e12 / 989.5e12 and figures.hfu == 300e12 / 989.5e12
    assert compute_line(figures) == (
        "compute 200 TFLOP/s (torch's FLOP count of each step), and 100 TFLOP/s recomputing activations, "
        "MFU 20.2% of 989.5 TFLOP/s (H200 SXM bf16 dense peak), HFU 30.3% (recomputation counted)"
    )
    job = mfu.of_job([figures, figures])
    assert job.hfu == 600e12 / (2 * 989.5e12) and job.recomputed_tflops == 200.0
    assert mfu.of_rank([2e12], [0.01], about()).hfu is None  # none recomputed: no HFU to tell apart
