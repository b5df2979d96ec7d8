"""The figures shown for a run, computed from events by hand-checkable definitions."""

import pytest

from mgpu_tui.engine.protocol.events import Hello, Step
from mgpu_tui.engine.run.figures.aggregate import Aggregator, warmup_steps


def step(rank, n, samples=32, loss=1.0, step_s=0.1, peak=None, t=None):
    return Step(rank, t or 100.0 + n, n, samples, 0, loss, step_s, None, peak)


def test_warmup_is_five_steps_or_a_fifth_of_a_short_run():
    assert [warmup_steps(n) for n in (0, 3, 10, 25, 300)] == [0, 0, 2, 5, 5]


def test_steady_state_rates_leave_out_warmup_and_sum_over_ranks():
    agg = Aggregator()
    for n in range(1, 31):  # 30 steps: warm-up is 5
        agg.add(step(0, n, step_s=1.0 if n <= 5 else 0.1))
        agg.add(step(1, n, step_s=1.0 if n <= 5 else 0.2))
    stats = agg.stats()
    rank0, rank1 = stats.ranks
    assert rank0.samples_per_s == pytest.approx(320.0)
    assert rank1.samples_per_s == pytest.approx(160.0)
    assert stats.samples_per_s == pytest.approx(480.0)
    # The job moves at its slowest rank's pace.
    assert stats.step_time_s_median == pytest.approx(0.2)
    assert stats.steps == 30


def test_zero_sample_ranks_add_no_throughput():
    agg = Aggregator()
    for n in range(1, 11):
        agg.add(step(0, n, samples=64, step_s=0.1))
        agg.add(step(1, n, samples=0, loss=None, step_s=0.1))  # a tensor-parallel peer
    stats = agg.stats()
    assert stats.samples_per_s == pytest.approx(640.0)
    # The peer has no rate of its own: n/a, not a 0 that reads as a rank doing nothing (issue #31).
    assert [r.samples_per_s for r in stats.ranks] == [pytest.approx(640.0), None]


def test_final_loss_is_the_global_batch_loss_at_the_last_common_step():
    agg = Aggregator()
    for n in range(1, 5):
        agg.add(step(0, n, samples=48, loss=2.0))
        agg.add(step(1, n, samples=16, loss=1.0))
    agg.add(step(0, 5, samples=48, loss=0.1))  # rank 1 has not reached step 5
    stats = agg.stats()
    assert stats.steps == 4
    assert stats.final_loss == pytest.approx((2.0 * 48 + 1.0 * 16) / 64)


def test_peak_memory_is_the_largest_reported_per_rank():
    agg = Aggregator()
    agg.add(Hello(0, 1.0, 0, 2, 10, "h", "cpu", None, "ddp", {}))
    for n, peak in enumerate([100, 300, 200], start=1):
        agg.add(step(0, n, peak=peak))
    agg.add(step(1, 1, peak=50))
    stats = agg.stats()
    assert stats.peak_mem_bytes() == {0: 300, 1: 50}
    assert stats.world_size == 2
    assert stats.first_step_t == pytest.approx(101.0)


def test_no_events_gives_no_numbers_rather_than_zeros():
    stats = Aggregator().stats()
    assert stats.samples_per_s is None and stats.final_loss is None
    assert stats.step_time_s_median is None and stats.steps == 0


def steps_with_data(agg: Aggregator, rank: int, data_s, step_s: float = 0.06) -> None:
    for step, data in enumerate(data_s, start=1):
        agg.add(
            Step(
                rank=rank,
                t=float(step),
                step=step,
                samples=8,
                tokens=0,
                loss=1.0,
                step_s=step_s,
                mem_bytes=None,
                mem_peak_bytes=None,
                data_s=data,
            )
        )


def test_the_rank_that_is_ready_last_step_after_step_is_named_a_straggler():
    import random

    rng = random.Random(0)
    agg = Aggregator()
    for rank in range(4):  # every step takes the slowest rank's time: step times cannot tell
        late = 0.05 if rank == 3 else 0.0
        steps_with_data(agg, rank, [late + rng.uniform(0, 0.004) for _ in range(40)])
    (straggler,) = agg.stats().stragglers
    assert straggler.rank == 3 and straggler.of_steps == 40 and straggler.steps >= 38
    assert straggler.late_s == pytest.approx(0.05, abs=0.005)
    assert straggler.describe().startswith("rank 3 arrives 5") and "loading data" in straggler.describe()


def test_noise_or_too_few_steps_name_no_straggler():
    import random

    rng = random.Random(1)
    noisy = Aggregator()
    for rank in range(4):  # who is last changes from step to step
        steps_with_data(noisy, rank, [rng.uniform(0, 0.02) for _ in range(200)])
    assert noisy.stats().stragglers == ()
    short = Aggregator()
    for rank in range(2):
        steps_with_data(short, rank, [0.1 * rank] * 5)  # late, but 5 steps are no pattern yet
    assert short.stats().stragglers == ()
    unknown = Aggregator()
    for rank in range(2):
        steps_with_data(unknown, rank, [None] * 40)  # a script that does not say: nothing guessed
    assert unknown.stats().stragglers == ()


def test_a_step_run_under_the_flop_count_is_left_out_of_the_figures_its_flops_kept():
    """Issue 54: the step in which a new input shape is counted ran under the counting mode, slower
    than the job runs: samples/s, step time and TF/s leave it out; the steps around it are the job's."""
    agg = Aggregator()
    for n in range(1, 31):
        observed = n == 20  # a shape counted late (a ragged batch): ten times slower
        step_s = 1.0 if observed else 0.1
        agg.add(Step(0, 100.0 + n, n, 32, 0, 1.0, step_s, None, None, flops=4 * 10**11, observed=observed))
    stats = agg.stats()
    (rank,) = stats.ranks
    assert rank.samples_per_s == pytest.approx(320.0) and stats.step_time_s_median == pytest.approx(0.1)
    assert stats.compute.tflops == pytest.approx(4.0)  # 4e11 FLOPs in each 0.1 s step
