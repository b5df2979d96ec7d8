"""Issue 41: why a job is slow, from its ranks' steps taken apart: each verdict with its number, named
only when clear and consistent (engine/run/figures/anatomy.py)."""

import random

from mgpu_tui.engine.protocol.events import STEP_PARTS
from mgpu_tui.engine.run.figures.anatomy import StepParts
from mgpu_tui.reports.anatomy import anatomy_lines, verdict_lines


def job(
    per_rank: dict[int, dict[str, float]], steps: int = 20, jitter: float = 0.0, seed: int = 0
) -> StepParts:
    """Each rank's steps with these seconds in each part (the others 0), a little noise if asked."""
    rng = random.Random(seed)
    parts = StepParts()
    for rank, seconds in per_rank.items():
        for step in range(1, steps + 1):
            values = tuple(
                max(0.0, seconds.get(p, 0.0) * (1 + rng.uniform(-jitter, jitter))) for p in STEP_PARTS
            )
            parts.add(rank, step, sum(values), values)
    return parts


def test_a_rank_starved_of_data_is_input_bound_and_the_others_wait_for_it():
    parts = job({0: {"forward": 0.002, "comm": 0.120}, 1: {"data": 0.120, "forward": 0.002}}, jitter=0.1)
    parts.loader_workers(1, 0)
    (verdict,) = parts.verdicts(warm=2, world_size=2, job="DDP", device="GPU")
    assert verdict.kind == "input-bound" and verdict.ranks == (1,)
    assert "rank 1 waits for its data 98% of each step, the others 0%" in verdict.text
    assert "98% of their step in communication" in verdict.text
    assert "num_workers=0" in verdict.hint  # what it said about its loader


def test_every_rank_waiting_for_its_data_is_input_bound_with_its_workers_in_the_hint():
    parts = job({0: {"data": 0.05, "forward": 0.01}, 1: {"data": 0.06, "forward": 0.01}})
    parts.loader_workers(0, 2)
    (verdict,) = parts.verdicts(warm=2, job="script's own", device="CPU")
    assert verdict.kind == "input-bound" and verdict.ranks == (0, 1)
    assert "every rank waits for its data 83%-86% of each step" in verdict.text
    assert "2 worker(s) cannot keep up" in verdict.hint


def test_a_rank_slow_at_the_same_compute_is_the_straggler_not_a_communication_bound_job():
    parts = job(
        {
            0: {"forward": 0.01, "backward": 0.02, "comm": 0.06},
            1: {"forward": 0.03, "backward": 0.06, "comm": 0.001},
            2: {"forward": 0.01, "backward": 0.02, "comm": 0.06},
        }
    )
    (verdict,) = parts.verdicts(warm=2)
    assert verdict.kind == "straggler" and verdict.ranks == (1,)
    assert (
        "rank 1 is slow in compute (forward, backward, the optimizer): 90 ms a step, the others 30 ms"
        in verdict.text
    )


def test_a_compute_bound_job_with_one_rank_slower_at_it_is_named_both():
    parts = job(
        {
            0: {"forward": 0.02, "backward": 0.04, "comm": 0.03},
            1: {"forward": 0.03, "backward": 0.06, "comm": 0.001},
        }
    )
    assert [(v.kind, v.ranks) for v in parts.verdicts(warm=2)] == [
        ("straggler", (1,)),
        ("compute-bound", (0, 1)),
    ]


def test_communication_compute_and_host_bound_jobs():
    comm = job({r: {"forward": 0.004, "backward": 0.01, "comm": 0.04} for r in range(2)}, jitter=0.1)
    assert [v.kind for v in comm.verdicts(warm=2)] == ["communication-bound"]
    assert "74% of each step on every rank" in comm.verdicts(warm=2)[0].text
    compute = job({r: {"forward": 0.03, "backward": 0.05, "comm": 0.01} for r in range(2)}, jitter=0.1)
    assert [v.kind for v in compute.verdicts(warm=2)] == ["compute-bound"]
    host = job({r: {"forward": 0.003, "host": 0.02} for r in range(2)})
    assert [v.kind for v in host.verdicts(warm=2)] == ["host-bound"]


def test_nothing_is_named_where_nothing_is_clear_or_too_early():
    even = job(
        {r: {"data": 0.01, "forward": 0.01, "backward": 0.01, "comm": 0.01, "host": 0.01} for r in range(2)}
    )
    assert even.verdicts(warm=2) == ()
    # comm the largest in the first half of the run, compute in the second: not consistent
    turned = StepParts()
    for rank in range(2):
        for step in range(1, 21):
            comm, compute = (0.05, 0.02) if step <= 10 else (0.02, 0.05)
            turned.add(rank, step, comm + compute, (0.0, compute, 0.0, comm, 0.0, 0.0))
    assert turned.verdicts(warm=2) == ()
    early = job({r: {"data": 0.1} for r in range(2)}, steps=6)
    assert early.verdicts(warm=2) == ()  # 4 steady steps: too few
    assert job({0: {"data": 0.1}}).verdicts(warm=2, world_size=2) == ()  # a rank not heard yet


def test_the_anatomy_is_the_mean_of_the_steady_steps_and_adds_up():
    parts = job({0: {"data": 0.01, "forward": 0.02, "host": 0.01}}, steps=10)
    parts.add(0, 1, 9.0, (9.0, 0, 0, 0, 0, 0))  # a warm-up step: left out
    (rank,) = parts.anatomy(warm=2)
    assert rank.steps == 8 and abs(rank.step_s - 0.04) < 1e-9 and abs(rank.parts_s - rank.step_s) < 1e-9
    assert abs(rank.share("data") - 0.25) < 1e-9 and abs(rank.share("compute") - 0.5) < 1e-9


def test_the_console_says_the_table_and_each_verdict_with_what_to_try():
    parts = job({0: {"forward": 0.002, "comm": 0.120}, 1: {"data": 0.120, "forward": 0.002}})
    lines = anatomy_lines(parts.anatomy(warm=2))
    assert lines[0] == "where a step goes (each rank's mean over its last 18 steady steps)"
    assert "98% 120 ms" in lines[1] and "2% 2.0 ms" in lines[1]
    said = verdict_lines(parts.verdicts(warm=2, job="DDP", device="CPU"))
    assert said[0].startswith("why it is slow: input-bound: rank 1") and said[1].startswith("  try: ")
    # A verdict with no change that applies to the job says none (advice.py): no empty "try:".
    comm = job({r: {"forward": 0.004, "backward": 0.01, "comm": 0.04} for r in range(2)})
    assert verdict_lines(comm.verdicts(warm=2, job="TP", device="GPU")) == [
        "why it is slow: communication-bound: the ranks wait for each other after backward's graph: "
        "74% of each step on every rank"
    ]
    assert anatomy_lines(()) == []


def test_the_run_views_bar_gives_each_part_its_share_of_the_cells_in_its_colour():
    from mgpu_tui.app.views.run.text import BAR, BAR_HEADER, PART_STYLE, rank_table, step_bar

    parts = job({0: {"forward": 0.002, "comm": 0.120}, 1: {"data": 0.120, "forward": 0.002}})
    anatomy = {a.rank: a for a in parts.anatomy(warm=2)}
    bar = step_bar(anatomy[1])
    assert bar.plain == "█" * BAR  # the cells always fill the bar
    colours = [span.style for span in bar.spans for _ in range(span.end - span.start)]
    assert colours == [PART_STYLE["data"]] * 16  # 98% of 16 cells: 15.7, the largest remainder up
    even = job({0: {"data": 0.01, "forward": 0.01, "backward": 0.02, "host": 0.02}}).anatomy(warm=2)[0]
    cells = [span.end - span.start for span in step_bar(even).spans]
    assert cells == [3, 3, 5, 5]  # 1/6, 1/6, 1/3, 1/3 of 16 cells: 2.67 twice rounded up, 5.33 down
    rows = [
        ("rank 0", "running", "20", "32", "0.5", "300 MiB"),
        ("rank 1", "slow", "20", "32", "0.5", "300 MiB"),
    ]
    text = rank_table(rows, bars=anatomy).plain
    assert BAR_HEADER in text.splitlines()[0] and "█ data  █ forward" in text.splitlines()[-1]
    assert BAR_HEADER not in rank_table(rows).plain  # no bars, no column: the table as it was
    assert max(len(line) for line in text.splitlines()) <= 76  # the 80-column screen's panel


def test_a_large_live_job_works_its_figures_out_again_at_most_every_two_seconds_but_its_summary_now():
    from mgpu_tui.engine.run.figures.anatomy import LARGE

    parts = job({r: {"data": 0.01, "forward": 0.01} for r in range(LARGE + 1)}, steps=10)
    live = parts.figures(warm=2, fresh=False)
    parts.add(0, 11, 1.0, (1.0, 0, 0, 0, 0, 0))  # a new step, within AGAIN_S
    assert parts.figures(warm=2, fresh=False) is live  # the live view's: the same, a moment old
    now = parts.figures(warm=2)  # the summary's: worked out again
    assert now[0][0].steps == live[0][0].steps + 1
    small = job({r: {"data": 0.01} for r in range(2)}, steps=10)
    first = small.figures(warm=2, fresh=False)
    small.add(0, 11, 1.0, (1.0, 0, 0, 0, 0, 0))
    assert small.figures(warm=2, fresh=False)[0][0].steps == first[0][0].steps + 1  # small: always now
