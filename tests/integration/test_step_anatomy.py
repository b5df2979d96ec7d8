"""Issue 41: where each rank's step goes, on real ranks over gloo with a cause of slowness planted in
a plain DDP loop written as users write theirs (tests/scripts/anatomy_train.py), and the parts of
a step adding up to its time in the demos and in a nanoGPT-shaped script."""

import json
from pathlib import Path

import pytest

from conftest import run_cli, summary_from
from mgpu_tui.engine.protocol.events import STEP_PARTS
from mgpu_tui.reports.run_summary import summary_text

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
ANATOMY = str(SCRIPTS / "anatomy_train.py")
MISSING = "mgpu-tui: some figures of this rank will be missing"


def run_script(tmp_path: Path, script: str, *args: str, nproc: int = 2):
    runs = str(tmp_path / "runs")
    done = run_cli(
        "run",
        "--json",
        "--run-dir",
        runs,
        "--script",
        script,
        "--nproc",
        str(nproc),
        "--",
        *args,
        timeout=150,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert MISSING not in done.stderr
    return summary_from(done.stdout), done.stderr


def test_a_rank_whose_dataset_is_slow_is_named_input_bound_and_the_other_waits_for_it(tmp_path):
    bare, _ = run_script(tmp_path / "bare", ANATOMY, "--steps", "12")
    slow, said = run_script(
        tmp_path / "slow", ANATOMY, "--steps", "12", "--slow-data-rank", "1", "--sleep", "0.03"
    )
    planted = 4 * 0.03  # a batch of 4 items, 30 ms each, on rank 1 alone
    planted_share = planted / (planted + bare.step_time_s_median)
    ranks = {a.rank: a for a in slow.anatomy}
    assert abs(ranks[1].share("data") - planted_share) <= 0.10, (ranks[1], planted_share)
    assert ranks[0].share("data") < 0.05 and ranks[0].share("comm") > 0.5  # it waits for rank 1
    (verdict,) = slow.verdicts
    assert verdict.kind == "input-bound" and verdict.ranks == (1,)
    assert "rank 1 waits for its data" in verdict.text and "num_workers=0" in verdict.hint
    assert "pin_memory" not in verdict.hint  # issue 56: a CPU job has no pinned memory to copy from
    assert "input-bound: rank 1 waits for its data" in said  # said while it ran, too
    assert not [v for v in bare.verdicts if v.kind == "input-bound"]


def test_a_wide_model_on_a_small_batch_is_communication_bound_and_a_heavy_one_compute_bound(tmp_path):
    # 64x2800 + 2800x2800 + 2800x1 weights: 8.0M parameters, all-reduced every step of 2 samples.
    wide, _ = run_script(tmp_path / "wide", ANATOMY, "--steps", "14", "--width", "2800", "--batch", "2")
    for rank in wide.anatomy:
        assert rank.comm_s == max(rank.seconds(p) for p in STEP_PARTS), rank
    # (On a busy machine one rank may also be named slower at its compute: both are then true.)
    assert {v.kind for v in wide.verdicts} - {"straggler"} == {"communication-bound"}, wide.anatomy
    # Issue 56: the script trains under DDP (its ranks said so): DDP's words and advice.
    (comm,) = [v for v in wide.verdicts if v.kind == "communication-bound"]
    assert "the gradients' all-reduce is not hidden behind backward" in comm.text and "no_sync()" in comm.hint
    # The middle layer (512 wide) run 80 times a forward: much compute, 0.3M parameters.
    heavy, _ = run_script(tmp_path / "heavy", ANATOMY, "--steps", "14", "--width", "512", "--compute", "80")
    assert {v.kind for v in heavy.verdicts} - {"straggler"} == {"compute-bound"}, heavy.anatomy


@pytest.mark.parametrize(
    "launch",
    [
        ("ddp", "--steps", "14", "--device", "cpu"),
        (
            "--script",
            str(SCRIPTS / "gpt_train.py"),
            "--nproc",
            "2",
            "--",
            "--max-iters",
            "14",
            "--eval-interval",
            "100",
        ),
    ],
    ids=["ddp demo", "nanoGPT-shaped script"],
)
def test_the_parts_of_a_step_add_up_to_its_time(tmp_path, launch):
    args = launch if launch[0] == "--script" else (*launch, "--nproc", "2")
    done = run_cli("run", "--json", "--run-dir", str(tmp_path / "runs"), *args, timeout=150)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = summary_from(done.stdout)
    assert [a.rank for a in summary.anatomy] == [0, 1]
    for rank in summary.anatomy:
        assert abs(rank.parts_s / rank.step_s - 1) <= 0.10, rank
        assert rank.forward_s > 0 and rank.backward_s > 0 and rank.optimizer_s > 0, rank
    assert "where a step goes" in summary_text(summary)  # as the console prints it at the end


def about_of(run_dir: str, rank: int) -> dict:
    events = Path(run_dir) / "events" / f"rank{rank}.jsonl"
    return next(e for e in map(json.loads, events.read_text().splitlines()) if e["kind"] == "about")


def test_a_loader_with_workers_and_a_loop_without_one_each_get_the_right_label(tmp_path):
    workers, _ = run_script(tmp_path / "workers", ANATOMY, "--steps", "12", "--workers", "2")
    for rank in workers.anatomy:
        assert rank.data_s > 0, rank  # the wait in __next__, the workers' batches arriving
        assert about_of(workers.run_dir, rank.rank)["loader_workers"] == 2
    none, _ = run_script(tmp_path / "none", ANATOMY, "--steps", "12", "--no-loader")
    for rank in none.anatomy:
        assert rank.data_s == 0 and rank.host_s > 0, rank  # batches made by hand: host time, not data
        assert "loader_workers" not in about_of(none.run_dir, rank.rank)
