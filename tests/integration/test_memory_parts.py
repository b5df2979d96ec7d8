"""Issue 60: where each rank's memory goes, for a job that knows nothing of mgpu-tui
(tests/scripts/memory_train.py: a tiny language model, its head tied to its embedding). Its
parameters, buffers, gradients and optimizer state as the watch read them at the last step's end
equal, to the byte, what the script counts over its own objects (numel x element size), one process
under ``exec`` and two DDP ranks under the drop-in; the activations its model's forward saved for
backward on the observed step are within 5% of the script's own count (its output's graph
walked); summary.json and the console's table say them; a planted leak is named, a clean job not."""

import json
import sys

import pytest

from conftest import CLI, REPO, results_of, run_exec, run_in, summary_from

SCRIPT = str(REPO / "tests" / "scripts" / "memory_train.py")
PARTS = ("parameters", "buffers", "gradients", "optimizer")


def held(summary, results, saved: dict[int, int] | None = None) -> None:
    assert {m.rank for m in summary.memory_parts} == set(results)
    for m in summary.memory_parts:
        assert {p: getattr(m, p) for p in PARTS} == {p: results[m.rank][p] for p in PARTS}, m
        assert 1 <= m.step <= summary.steps and m.peak_bytes and m.kept_graphs is None
        if saved is not None:  # the observed step's activations, against the script's own count
            assert m.activations is not None and abs(m.activations - saved[m.rank]) <= 0.05 * saved[m.rank]
            assert m.rest == m.peak_bytes - m.held - m.activations


def saved_of(text: str) -> dict[int, int]:
    """The bytes the script counted saved for backward, by rank (each step's are the same here)."""
    counts = [json.loads(line.split("SAVED ", 1)[1]) for line in text.splitlines() if "SAVED {" in line]
    assert counts
    return {rank: counts[0]["bytes"] for rank in (0, 1)}


@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_one_process_under_exec_holds_what_it_counts_to_the_byte(tmp_path, optimizer):
    done, run_dir = run_exec(tmp_path, sys.executable, SCRIPT, "--tie", "--optimizer", optimizer, "--saved")
    assert done.returncode == 0, done.stderr[-3000:]
    summary = summary_from(done.stdout)
    held(summary, results_of(done.stdout + done.stderr), saved_of(done.stdout + done.stderr))
    document = json.loads((run_dir / "summary.json").read_text())
    assert [m["parameters"] for m in document["memory_parts"]] == [summary.memory_parts[0].parameters]


@pytest.mark.parametrize("optimizer", ["adamw", "sgd-momentum"])
def test_two_ddp_ranks_under_the_drop_in_hold_what_they_count_to_the_byte(tmp_path, optimizer):
    argv = [*CLI, "torchrun", "--run-dir", str(tmp_path / "runs"), "--json",
            "--nproc-per-node", "2", SCRIPT, "--optimizer", optimizer, "--saved"]  # fmt: skip
    done, _ = run_in(tmp_path, argv)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = summary_from(done.stdout)
    results = results_of(done.stdout + done.stderr)
    assert set(results) == {0, 1}
    held(summary, results, saved_of(done.stdout + done.stderr))


def test_the_console_says_where_the_memory_goes(tmp_path):
    runs = tmp_path / "runs"
    done = run_in(tmp_path, [*CLI, "exec", "--run-dir", str(runs), "--", sys.executable, SCRIPT])[0]
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("where the memory goes"))
    assert lines[head + 1].split() == [
        "parameters",
        "buffers",
        "gradients",
        "optimizer",
        "activations",
        "rest",
        "peak",
    ]
    assert lines[head + 3].startswith("rank 0")
    assert "memory creeps" not in done.stdout


def test_a_loss_kept_every_step_is_named_as_creep_with_its_growth_and_the_line_that_keeps_it(tmp_path):
    done, run_dir = run_exec(tmp_path, sys.executable, SCRIPT, "--leak", "--steps", "24")
    assert done.returncode == 0, done.stderr[-3000:]
    (m,) = summary_from(done.stdout).memory_parts
    assert m.leaks and m.kept_graphs == 24 - 3 - 2  # from warm-up on, the last two steps' left out
    assert m.growth_per_step is not None  # the slope of its memory since it began keeping them
    assert m.kept_by is not None and m.kept_by.startswith("`kept` in main() (memory_train.py:")
    assert m.kept_by.endswith(": kept.append(loss)  # the leak: each step's loss, and with it its graph)")
    (path,) = (run_dir / "events").glob("*.jsonl")  # its one process's (a trainer of its own: the job)
    events = [json.loads(line) for line in path.read_text().splitlines()]
    named = next(e["step"] for e in events if e["kind"] == "step" and e.get("kept_graphs", 0) >= 8)
    assert named <= 3 + 20  # within 20 steps of warm-up


def test_a_clean_job_over_200_steps_is_not_called_a_leak(tmp_path):
    done, _ = run_exec(tmp_path, sys.executable, SCRIPT, "--steps", "200", "--batch", "2", "--seq", "4")
    assert done.returncode == 0, done.stderr[-3000:]
    summary = summary_from(done.stdout)
    (m,) = summary.memory_parts
    assert summary.steps == 200 and not m.leaks and m.kept_graphs is None and m.kept_by is None
