"""A week-long job's figures come from bounded state (issue 64): the same as when every step of every
rank was kept, on recorded runs (tests/fixtures/events: real runs, SOURCES.md), and within the bins'
1% past a rank's window, which here is made a few steps long so that these short runs outgrow it.

The figures of before are tests/figures_before.py: the aggregator as it was (commit 2ac661f), every
step held in memory."""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
import statistics
from pathlib import Path

import figures_before
import pytest

from mgpu_tui.engine.planning.modes import MODES
from mgpu_tui.engine.protocol import events
from mgpu_tui.engine.protocol.events import Step, parse_line
from mgpu_tui.engine.run.figures.aggregate import Aggregator, read_events
from mgpu_tui.engine.run.figures.anatomy import WINDOW as ANATOMY_WINDOW
from mgpu_tui.engine.run.figures.long_run import whole_run
from mgpu_tui.engine.run.figures.rank_stats import BATCH_STEPS
from mgpu_tui.engine.run.figures.stragglers import STRAGGLER_WINDOW

RECORDED = sorted(p for p in (Path(__file__).parents[1] / "fixtures" / "events").iterdir() if p.is_dir())


def close(a, b, rel: float = 1e-12) -> bool:
    """Equal, floats within ``rel`` (a sum added in another order, as Python 3.12's sum() does)."""
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=rel) or (math.isnan(a) and math.isnan(b))
    if dataclasses.is_dataclass(a) and type(a) is type(b):
        return all(close(getattr(a, f.name), getattr(b, f.name), rel) for f in dataclasses.fields(a))
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(close(x, y, rel) for x, y in zip(a, b))
    return a == b


def differences(a, b, rel: float = 1e-12) -> dict:
    return {f.name: (getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a)
            if not close(getattr(a, f.name), getattr(b, f.name), rel)}  # fmt: skip


def interleaved(run: Path) -> list:
    """Every event of the run, the ranks' in turn line by line (as a live view reads them)."""
    files = [f.read_bytes().splitlines() for f in sorted((run / "events").glob("rank*.jsonl"))]
    return [parse_line(lines[i]) for i in range(max(map(len, files))) for lines in files if i < len(lines)]


@pytest.fixture
def small_windows(monkeypatch):
    """A rank keeps 16 steps whole, folds 8 at a time into buckets of 4 steps, at most 8 of them."""
    small = (
        ("WINDOW", 16),
        ("MIN_WINDOW", 16),
        ("FOLD_SHARE", 2),
        ("MIN_FOLD", 8),
        ("BLOCK", 4),
        ("BUCKETS", 8),
    )
    for name, value in small:
        monkeypatch.setattr(whole_run, name, value)


@pytest.mark.parametrize("run", RECORDED, ids=lambda p: p.name)
def test_a_recorded_run_has_every_figure_it_had_with_every_step_kept(run):
    before, now = figures_before.read_events(run), read_events(run)
    assert differences(before.stats(), now.stats()) == {}
    assert close(before.series(), now.series()) and close(before.whole_series(), now.whole_series())
    # And as a live view sees it, every few events.
    before, now = figures_before.Aggregator(), Aggregator()
    for i, event in enumerate(interleaved(run)):
        before.add(event)
        now.add(event)
        if i % 23 == 0:
            assert differences(before.stats(), now.stats()) == {}, i
            assert close(before.series(), now.series()) and before.liveness() == now.liveness()
            assert before.recent_step_time() == now.recent_step_time()
    assert differences(before.stats(), now.stats()) == {}


def test_the_latest_steps_every_figure_reads_are_always_within_a_ranks_window():
    least = whole_run.window_for(1 << 20)  # a rank of the largest job
    assert least > STRAGGLER_WINDOW + 1 and least > BATCH_STEPS and least > ANATOMY_WINDOW


@pytest.mark.parametrize("run", RECORDED, ids=lambda p: p.name)
def test_past_its_window_every_sum_stays_exact_and_the_step_time_within_its_bins(run, small_windows):
    before, now = figures_before.read_events(run).stats(), read_events(run).stats()
    differ = differences(before, now)
    # The stragglers look at the latest 500 steps, which a real window always holds (above); here
    # there are 16. The step time's median and percentiles come from bins 2% wide past the window.
    differ.pop("stragglers", None)
    for name in ("step_time_s_median", "step_time_s_spread"):
        if name in differ:
            assert close(*differ.pop(name), rel=0.01), name
    assert differ == {}


@pytest.mark.parametrize("run", RECORDED, ids=lambda p: p.name)
def test_past_its_window_the_whole_run_chart_is_each_buckets_samples_over_its_slowest_seconds(
    run, small_windows
):
    events = interleaved(run)
    aggregator = Aggregator()
    for event in events:
        aggregator.add(event)
    steps, rates, losses = aggregator.whole_series()
    every = figures_before.Aggregator()
    for event in events:
        every.add(event)
    per_step = dict(zip(*[every.series(max_points=10**9)[i] for i in (0, 1)]))
    common = aggregator.stats().steps
    assert steps == sorted(steps) and (not steps or steps[-1] == common) and len(steps) <= 300
    cut = max((t.frontier for t in aggregator._ranks.values() if t.folded), default=None)
    by_rank: dict[int, list[Step]] = {}
    for e in events:
        if isinstance(e, Step):
            by_rank.setdefault(e.rank, []).append(e)
    first = 0
    for step, rate in zip(steps, rates):
        if cut is not None and step < cut:  # a bucket of steps: its samples over its slowest rank's seconds
            each = [[e for e in s if first < e.step <= step] for s in by_rank.values()]
            slowest = max(sum(e.step_s for e in s) for s in each)
            assert math.isclose(rate, sum(e.samples for s in each for e in s) / slowest, rel_tol=1e-9)
        else:  # a step whole: as the recent chart figures it
            assert math.isclose(rate, per_step[step], rel_tol=1e-12), step
        first = step


def seconds_of(step: int, rank: int) -> float:
    """A synthetic rank's step time: a spread of them, the same each run."""
    return 0.1 + 0.01 * ((step * 7 + rank * 3) % 11)


def test_a_run_much_longer_than_its_window_holds_a_bounded_track(small_windows):
    aggregator, steps = Aggregator(), 8_000
    for step in range(1, steps + 1):
        for rank in (0, 1):
            aggregator.add(
                Step(rank, 1e9 + step, step, 32, 0, 2.0 - step * 1e-5, seconds_of(step, rank), None, None)
            )
    stats = aggregator.stats()
    for track in aggregator._ranks.values():
        assert len(track.steps) <= 16 + 8 and len(track.buckets) <= 8
        assert track.n == steps and track.folded + len(track.steps) == steps
    assert len(aggregator._job.pending) <= 2 * 8
    # Exact: each rank's steady seconds summed in order; the job's median step time (per step, its
    # slowest rank's) within its bin.
    steady = range(6, steps + 1)
    rate = sum(32 * len(steady) / sum(seconds_of(s, r) for s in steady) for r in (0, 1))
    assert stats.samples_per_s == rate and stats.steps == steps
    times = sorted(max(seconds_of(s, 0), seconds_of(s, 1)) for s in steady)
    assert math.isclose(stats.step_time_s_median, statistics.median(times), rel_tol=0.01)
    low, high = statistics.quantiles(times, n=10, method="inclusive")[::8]
    assert close(stats.step_time_s_spread, (low, high), rel=0.01)
    whole = aggregator.whole_series()
    assert 0 < len(whole[0]) <= 300 and whole[0][-1] == steps and whole[0][0] <= steps // 4


def test_a_run_folder_written_before_bounded_files_opens_with_its_figures(tmp_path):
    """ddp-600 was written by mgpu-tui before issue 64 (a rank's events in one file): it opens as it
    did, every line of it read, its figures those of every step."""
    from mgpu_tui.engine.records.follow import FollowedRun

    run = tmp_path / "ddp-600"
    shutil.copytree(RECORDED[[p.name for p in RECORDED].index("ddp-600")], run)
    followed = FollowedRun(run)
    assert followed.poll().finished and followed.summary is not None and followed.summary.steps == 600
    before = figures_before.read_events(run, job=MODES["ddp"].job)  # (the job's advice, as a replay's)
    assert differences(before.stats(), followed.stats()) == {}
    assert followed.malformed_events == 0
    followed.close()


def test_a_long_runs_telemetry_is_read_back_thinned_to_its_last_sample(tmp_path, monkeypatch):
    """Opened, a week of telemetry (here 2,000 samples, its charts' worth made 50) is read one line in
    so many, its last whole: opening it costs the same whatever its length."""
    from mgpu_tui.engine.records import follow

    monkeypatch.setattr(follow, "TELEMETRY_POINTS", 50)
    run = tmp_path / "ddp-600"
    shutil.copytree(RECORDED[[p.name for p in RECORDED].index("ddp-600")], run)
    gpu = {"i": 0, "uuid": "GPU-0", "mem_used": 1 << 30, "mem_total": 80 << 30, "util": 97, "power_w": 600.0}
    with open(run / "telemetry.jsonl", "w") as f:
        for t in range(2000):
            host = {"cpu": 50.0, "mem_used": 1 << 30, "mem_total": 1 << 40, "pad": "x" * 100}
            f.write(json.dumps({"t": 1000.0 + t, "host": host, "gpus": [gpu]}) + "\n")
    followed = follow.FollowedRun(run)
    followed.poll()
    seen = followed.telemetry.t
    assert 40 < len(seen) < 200 and seen[0] < 1020 and seen[-1] == 2999.0
    followed.close()


OBSERVED = {0: {1, 3, 20, 37, 38}, 1: {20, 51}}  # the steps each rank ran under the FLOP count (issue 54)


@pytest.fixture
def observed_run(tmp_path) -> Path:
    """A synthetic run of 2 ranks on an H100 in bf16 (so MFU and HFU are figures), 64 steps each: each
    step's FLOPs counted, rank 0's activations recomputed (recomputed_flops), a few steps of each run
    under the FLOP count (observed: ten times slower), in the warm-up, past it and past a window of 16."""
    (tmp_path / "events").mkdir()
    for rank in (0, 1):
        lines = [
            events.encode("hello", rank, 1e9, {"local_rank": rank, "world_size": 2, "pid": 100 + rank,
                                               "host": "h", "device": f"cuda:{rank}", "device_uuid": None,
                                               "mode": "script"}),
            events.encode("about", rank, 1e9, {"device": f"cuda:{rank}", "device_uuid": None,
                                               "backend": "nccl", "precision": "bf16",
                                               "device_name": "NVIDIA H100 80GB HBM3"}),
        ]  # fmt: skip
        for step in range(1, 65):
            seen = step in OBSERVED[rank]
            fields = {"step": step, "samples": 32, "tokens": 4096, "loss": 3.0 - step / 100,
                      "step_s": seconds_of(step, rank) * (10 if seen else 1), "mem_bytes": 1 << 30,
                      "mem_peak_bytes": 1 << 31, "flops": 4 * 10**14 + step * 10**9 + rank,
                      **({"recomputed_flops": 10**14 + step} if rank == 0 else {}),
                      **({"observed": True} if seen else {})}  # fmt: skip
            lines.append(events.encode("step", rank, 1e9 + step, fields))
        (tmp_path / "events" / f"rank{rank}.jsonl").write_text("".join(lines))
    return tmp_path


def test_a_run_with_observed_and_recomputed_steps_has_every_figure_whole_and_past_its_window(
    observed_run, monkeypatch
):
    """Issue 54's figures kept by the bounded tracks: the recomputed FLOPs (HFU) a running sum as the
    FLOPs, the observed steps left out of step time, samples/s and TF/s, as main's aggregator has them."""
    stats = read_events(observed_run).stats()
    (rank0, rank1) = stats.ranks
    assert rank0.compute and rank0.compute.hfu and rank0.compute.hfu > rank0.compute.mfu  # (figures, not n/a)
    assert rank1.compute and rank1.compute.hfu is None and stats.compute and stats.compute.hfu
    steady = [s for s in range(6, 65) if s not in OBSERVED[0]]  # (the warm-up: 5 of 64 steps)
    assert rank0.samples_per_s == 32 * len(steady) / sum(seconds_of(s, 0) for s in steady)
    test_a_recorded_run_has_every_figure_it_had_with_every_step_kept(observed_run)
    for name, value in (("WINDOW", 16), ("MIN_WINDOW", 16), ("FOLD_SHARE", 2), ("MIN_FOLD", 8), ("BLOCK", 4)):
        monkeypatch.setattr(whole_run, name, value)
    test_past_its_window_every_sum_stays_exact_and_the_step_time_within_its_bins(observed_run, None)
    test_past_its_window_the_whole_run_chart_is_each_buckets_samples_over_its_slowest_seconds(
        observed_run, None
    )
    folded = read_events(observed_run)._ranks[0]
    assert folded.folded == 40 and folded.observed_n[5] == 3  # (steps 20, 37, 38: folded, counted apart)
