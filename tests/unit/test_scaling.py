"""scale's points: which batch and learning rate each gets, and the loss after the same samples."""

import dataclasses
import math

import pytest

from mgpu_tui.engine.compare.comparison import Row
from mgpu_tui.engine.compare.scaling import points, scale_specs, scaled_lr, sweep_of
from mgpu_tui.engine.launch.errors import SpecError
from mgpu_tui.engine.launch.spec import LaunchSpec
from mgpu_tui.engine.run.summary import RunStatus

TEMPLATE = LaunchSpec(mode="single", steps=20, batch_size=64, lr=0.02)


def test_weak_scaling_grows_the_global_batch_and_the_lr_with_the_ranks_and_warms_up():
    specs = scale_specs("ddp", [4, 1, 2], [32], TEMPLATE, weak=True)
    assert [(s.nproc, s.batch_size) for s in specs] == [(1, 32), (2, 64), (4, 128)]
    assert [s.lr for s in specs] == pytest.approx([0.02, 0.04, 0.08])
    assert {s.warmup_steps for s in specs} == {4}  # a fifth of the 20 steps, the same for every point


def test_strong_scaling_keeps_the_batch_the_lr_and_needs_no_warm_up():
    specs = scale_specs("fsdp", [1, 2], [64], TEMPLATE)
    points = [(s.nproc, s.batch_size, s.lr, s.warmup_steps) for s in specs]
    assert points == [(1, 64, 0.02, 0), (2, 64, 0.02, 0)]


def test_a_batch_sweep_at_one_rank_count_follows_the_rule_chosen():
    specs = scale_specs("ddp", [2], [128, 32], TEMPLATE, lr_rule="sqrt", warmup_steps=0)
    assert [(s.nproc, s.batch_size) for s in specs] == [(2, 32), (2, 128)]
    assert [s.lr for s in specs] == pytest.approx([0.02, 0.04])  # sqrt(4) = 2
    assert [s.lr for s in scale_specs("ddp", [2], [32, 128], TEMPLATE, lr_rule="none")] == [0.02, 0.02]
    assert scaled_lr(0.1, 8, "linear") == pytest.approx(0.8)
    assert scaled_lr(0.1, 2, "sqrt") == pytest.approx(0.1 * math.sqrt(2))


@pytest.mark.parametrize(
    "nprocs, batches, weak, message",
    [
        ([1, 2], [32, 64], False, "not both"),
        ([2], [32, 64], True, "--weak grows the batch"),
        ([1, 1], [32], False, "rank count twice"),
        ([2], [32, 32], False, "batch size twice"),
        ([1, 2], [32], True, "tp gives every rank the whole batch"),
    ],
)
def test_sweeps_that_cannot_be_are_refused_in_one_sentence(nprocs, batches, weak, message):
    with pytest.raises(SpecError, match=message):
        scale_specs("tp" if "tp" in message else "ddp", nprocs, batches, TEMPLATE, weak=weak)


def test_rpc_is_scaled_without_a_warm_up_unless_one_is_asked_for():
    assert {s.warmup_steps for s in scale_specs("rpc", [2], [8, 16], TEMPLATE)} == {0}
    assert {s.warmup_steps for s in scale_specs("rpc", [2], [8, 16], TEMPLATE, warmup_steps=3)} == {3}


def _row(world_size: int, batch: int, rate: float, losses: list[float]) -> Row:
    return Row(
        mode="ddp",
        status=RunStatus.OK,
        world_size=world_size,
        devices=world_size,
        samples_per_s=rate,
        samples_per_s_per_device=rate / world_size,
        tokens_per_s=None,
        step_time_s_median=batch / rate,
        step_time_s_p10_p90=None,
        tflops_per_device=None,
        mfu=None,
        peak_mem_bytes=None,
        peak_mem_bytes_per_rank=[],
        final_loss=losses[-1],
        loss_curve=[[i + 1, v] for i, v in enumerate(losses)],
        throughput_curve=[],
        duration_s=1.0,
        run_dir="r",
        root_cause=None,
        note=None,
        batch_size=batch,
        lr=0.02,
    )


def test_each_point_reports_its_loss_once_it_has_seen_the_samples_of_the_first_points_whole_run():
    one = _row(1, 32, 100.0, [2.0, 1.8, 1.6, 1.4])  # 4 steps x 32 = 128 samples
    two = _row(2, 64, 180.0, [2.0, 1.5, 1.2, 1.1])  # 128 samples after step 2
    first, second = points([one, two], "weak", steps=4)
    assert (first.loss_step, first.loss_after_common_samples) == (4, 1.4)
    assert (second.loss_step, second.loss_after_common_samples) == (2, 1.5)
    assert second.speedup == pytest.approx(1.8) and second.efficiency == pytest.approx(0.9)
    assert (second.batch_size, second.final_loss) == (64, 1.1)


def test_a_batch_sweep_has_a_speedup_but_no_efficiency_and_a_failed_point_has_neither():
    small, big = _row(2, 32, 100.0, [2.0, 1.0]), _row(2, 64, 150.0, [2.0, 1.0])
    failed = dataclasses.replace(_row(2, 128, 1.0, [2.0]), status=RunStatus.FAILED)
    a, b, c = points([small, big, failed], "batch", steps=2)
    assert (b.speedup, b.efficiency) == (pytest.approx(1.5), None)
    assert (c.speedup, c.efficiency) == (None, None)
    assert sweep_of([2], [32, 64], weak=False) == "batch" and sweep_of([1, 2], [32], weak=True) == "weak"


def test_an_efficiency_over_100_percent_is_flagged_as_not_trustworthy():
    """Issue #31: identical runs gave 912% then 18% on a busy machine, and nothing warned."""
    from mgpu_tui.engine.compare.comparison import new_scaling
    from mgpu_tui.reports.compare import scale_notes

    specs = scale_specs("ddp", [1, 2, 4], [32], TEMPLATE)
    comparison = new_scaling("ddp", specs, "strong", "linear")
    one, two, four = _row(1, 32, 100.0, [2.0]), _row(2, 32, 1824.0, [2.0]), _row(4, 32, 200.0, [2.0])
    comparison.rows = [one, two, four]
    flagged = [n for n in scale_notes(comparison) if n.startswith("NOT TRUSTWORTHY")]
    assert flagged == [
        "NOT TRUSTWORTHY: efficiency over 100% at 2 ranks (912.0%): more ranks cannot do more than their "
        "share; the machine was busy or the first point ran slow. Run again on an idle machine."
    ]
    comparison.rows = [one, _row(2, 32, 190.0, [2.0])]  # 95%: as it should be, nothing said
    assert not any(n.startswith("NOT TRUSTWORTHY") for n in scale_notes(comparison))


def test_a_row_whose_samples_per_s_and_median_step_disagree_says_which_holds_and_why():
    """Issue 61: under load a row read 1,282 samples/s beside a median step of 8.6 ms at batch 64
    (7,442/s). The figures are the engine's own, from steps of 8.6 ms but one in eight of 300 ms (a
    busy machine pausing the ranks): the row marks its samples/s and a note says which holds."""
    import time

    from mgpu_tui.engine.compare.comparison import new_scaling
    from mgpu_tui.engine.protocol.events import Hello, Step
    from mgpu_tui.engine.run.figures.aggregate import Aggregator
    from mgpu_tui.reports.compare import DISAGREES, scale_table

    def figures(paused: bool) -> tuple[float, float]:
        events, now = Aggregator(), time.time()
        for rank in (0, 1):
            events.add(Hello(rank, now - 60, rank, 2, 4000 + rank, "h", "cpu", None, "ddp"))
            for step in range(1, 81):
                seconds = 0.3 if paused and step % 8 == 0 else 0.0086
                events.add(Step(rank, now - (80 - step), step, 32, 0, 1.0, seconds, 1 << 20, 1 << 20))
        stats = events.stats()
        return stats.samples_per_s, stats.step_time_s_median

    specs = scale_specs("ddp", [1, 2], [64], TEMPLATE)
    comparison = new_scaling("ddp", specs, "strong", "linear")
    steady, busy = figures(paused=False), figures(paused=True)
    assert busy[1] == pytest.approx(0.0086) and busy[0] < 64 / 0.0086 / 3  # the contradiction
    one = dataclasses.replace(_row(1, 64, steady[0], [2.0]), step_time_s_median=steady[1])
    two = dataclasses.replace(_row(2, 64, busy[0], [2.0]), step_time_s_median=busy[1])
    comparison.rows = [one, two]
    text = scale_table(comparison)
    lines = text.splitlines()
    row_one, row_two = (next(line for line in lines if line.split()[:2] == [n, "ok"]) for n in ("1", "2"))
    assert DISAGREES not in row_one and f"{busy[0]:,.0f}{DISAGREES}" in row_two.replace(" ", "")
    (note,) = [line for line in lines if line.startswith(DISAGREES)]
    assert note.startswith(f"{DISAGREES} at 2 rank(s), batch 64: samples/s counts the steps' whole time")
    assert "the median step, 8.6 ms, would give 7,442 samples/s" in note
    assert "The samples/s holds for the run: a few steps took far longer than most" in note
    (point,) = [p for p in comparison.points() if p.nproc == 2]
    assert point.figures_disagree and point.step_time_s_mean == pytest.approx(64 / busy[0])
