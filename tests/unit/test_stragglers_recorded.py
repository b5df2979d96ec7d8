"""The straggler rule on real runs' flight records (tests/fixtures/stragglers, made by
scripts/record-stragglers.py): ten clean runs of the GPT script on two busy cores name nobody, and a
rank 50 ms slow in each batch is named alone. Each meta.json keeps what the rule before this one
said of the run: it named a clean rank in four of the ten."""

import json
from pathlib import Path

import pytest

from mgpu_tui.engine.run.nccl.flight_records import Collective, late_arrivals, parse_entry, read_trace

RECORDED = Path(__file__).resolve().parent.parent / "fixtures" / "stragglers"
CLEAN = sorted(RECORDED.glob("clean-*"))
SLOW = sorted(RECORDED.glob("slow-*"))


def recorded(run: Path):
    traces = {rank: read_trace(run / f"rank{rank}.json") for rank in (0, 1)}
    return traces, json.loads((run / "meta.json").read_text())


def test_there_are_ten_clean_runs_and_the_old_rule_named_a_straggler_in_some():
    assert len(CLEAN) == 10 and len(SLOW) >= 3
    named_before = [run.name for run in CLEAN if recorded(run)[1]["stragglers"]]
    assert len(named_before) >= 3  # the defect these runs pin down


@pytest.mark.parametrize("run", CLEAN, ids=lambda p: p.name)
def test_a_clean_run_under_load_names_nobody(run):
    traces, meta = recorded(run)
    assert all(len(entries) >= 10 for entries in traces.values())
    assert late_arrivals(traces, meta["step_time_s_median"]) == ()


@pytest.mark.parametrize("run", SLOW, ids=lambda p: p.name)
def test_a_rank_slow_in_every_batch_is_named_alone(run):
    traces, meta = recorded(run)
    (straggler,) = late_arrivals(traces, meta["step_time_s_median"])
    assert straggler.rank == 1 and straggler.counted == "collectives"
    assert 0.08 < straggler.late_s < 0.12  # two batches of 50 ms a step (gradient accumulation 2)
    assert straggler.steps >= 0.9 * straggler.of_steps


def entry(seq: int, created_ns: int, duration_ms: float | None = None) -> Collective | None:
    return parse_entry(
        {
            "collective_seq_id": seq,
            "profiling_name": "nccl:all_reduce",
            "time_created_ns": created_ns,
            "duration_ms": duration_ms,
        }
    )


def test_on_nccl_the_durations_decide_the_rank_that_waits_least_is_late():
    # The CPU runs ahead of the GPU: every rank enqueues at once, but rank 2's kernel starts 40 ms
    # late, so its all_reduce is the shortest (the others waited for it inside theirs).
    t0 = 1_700_000_000_000_000_000
    traces = {
        rank: [entry(seq, t0 + seq * 10**8, 45.0 if rank != 2 else 5.0) for seq in range(1, 31)]
        for rank in range(4)
    }
    (straggler,) = late_arrivals(traces, step_s=0.1)
    assert straggler.rank == 2 and abs(straggler.late_s - 0.040) < 1e-9 and straggler.steps == 30


def test_on_nccl_equal_durations_name_nobody_whatever_the_enqueue_times():
    t0 = 1_700_000_000_000_000_000
    traces = {
        rank: [entry(seq, t0 + seq * 10**8 + rank * 30_000_000, 20.0) for seq in range(1, 31)]
        for rank in range(2)
    }
    assert late_arrivals(traces, step_s=0.1) == ()
