"""Issue 56: each verdict on why a job is slow says what its part is and the change to try for what the
job is (DDP, FSDP, pipeline, TP, a script's own, one process) on its device, and nothing that does not
apply: the table in engine/run/figures/advice.py, walked row by row, and the same table in
docs/run-view.md. On 8177ed0 a pipeline was told of DDP's all-reduce and no_sync(), and a CPU job
of pin_memory=True."""

import json
import re
from pathlib import Path

import pytest
from test_step_verdicts import job as steps_of

from mgpu_tui.engine.planning.modes import EXEC, MODES, SCRIPT
from mgpu_tui.engine.protocol.events import encode
from mgpu_tui.engine.run.figures.advice import ADVICE, JOBS, advice, job_of, loader_words

DOC = Path(__file__).resolve().parents[2] / "docs" / "run-view.md"

# Each verdict made to hold on a job of two ranks (the straggler: three, one slower at the same work).
MADE = {
    "input-bound": {r: {"data": 0.05, "forward": 0.01} for r in range(2)},
    "straggler": {
        0: {"forward": 0.01, "backward": 0.02, "comm": 0.06},
        1: {"forward": 0.03, "backward": 0.06, "comm": 0.001},
        2: {"forward": 0.01, "backward": 0.02, "comm": 0.06},
    },
    "communication-bound": {r: {"forward": 0.004, "backward": 0.01, "comm": 0.04} for r in range(2)},
    "compute-bound": {r: {"forward": 0.03, "backward": 0.05, "comm": 0.01} for r in range(2)},
    "host-bound": {r: {"forward": 0.003, "host": 0.02} for r in range(2)},
}

# What a kind of job or device does not have, so that its advice must never speak of it.
NOT_THERE = {
    "CPU": r"\b(its|the) GPU|pin_memory|bf16|autocast|nvidia-smi|NCCL|kernel",
    "pipeline": r"all-reduce|no_sync|bucket_cap_mb|DistributedDataParallel|reduce-scatter",
    "TP": r"no_sync|bucket_cap_mb|DistributedDataParallel|reduce-scatter|share of the batch|micro-batch",
    "one process": r"\brank|collective|all-reduce|no_sync|bucket_cap_mb|DistributedDataParallel|stage",
    "DDP": r"FSDP|reduce-scatter|stage",
    "FSDP": r"bucket_cap_mb|DDP's|stage",
    "script's own": r"bucket_cap_mb|stage",
}


def test_the_table_has_one_row_for_each_verdict_and_job():
    keys = [(a.verdict, a.job) for a in ADVICE]
    assert len(keys) == len(set(keys)) == len(MADE) * len(JOBS)
    assert {a.job for a in ADVICE} == set(JOBS) and {a.verdict for a in ADVICE} == set(MADE)


@pytest.mark.parametrize("row", ADVICE, ids=lambda a: f"{a.verdict}-{a.job}")
@pytest.mark.parametrize("device", ["GPU", "CPU"])
def test_each_verdict_says_its_rows_words_and_advice_for_its_job_on_its_device(row, device):
    parts = steps_of(MADE[row.verdict])
    found = [v for v in parts.verdicts(warm=2, job=row.job, device=device) if v.kind == row.verdict]
    assert len(found) == 1, [v.kind for v in parts.verdicts(warm=2, job=row.job, device=device)]
    (verdict,) = found
    wanted = row.gpu if device == "GPU" else row.cpu
    assert verdict.hint == (None if wanted is None else wanted.format(loader=loader_words(set())))
    if row.says:
        assert row.says in verdict.text
    said = f"{row.says or ''} {verdict.hint or ''}"  # the table's words (the numbers are anatomy.py's)
    for what in (device, row.job):
        if what in NOT_THERE:
            assert not re.search(NOT_THERE[what], said), (what, said)


def test_a_device_nobody_named_gets_only_the_advice_that_holds_on_both():
    assert advice("compute-bound", "DDP", None) is None  # a GPU's and the CPU's differ
    same = next(a for a in ADVICE if a.verdict == "communication-bound" and a.job == "DDP")
    assert advice("communication-bound", "DDP", None) == same.gpu == same.cpu
    assert advice("compute-bound", None, "GPU") is None  # a job nobody named: nothing


def test_every_mode_of_the_catalogue_and_every_wrapper_the_watch_counts_under_is_a_job_of_the_table():
    from mgpu_tui.engine.rank.watch.model_root import BATCH_SOURCE, LOADER_SOURCE, batch_source

    assert {m.name: m.job for m in MODES.values()} == {
        "single": "one process",
        "dp": "one process",
        "ddp": "DDP",
        "zero1": "DDP",
        "mp": "one process",
        "ddp_mp": "DDP",
        "pipeline": "pipeline",
        "fsdp": "FSDP",
        "fsdp_grad_op": "FSDP",
        "rpc": "pipeline",
        "tp": "TP",
        "hybrid": "one process",
    }
    assert SCRIPT.job == EXEC.job == "script's own"
    assert job_of([BATCH_SOURCE["ddp"], BATCH_SOURCE["ddp"]]) == "DDP"
    assert job_of([BATCH_SOURCE["fsdp"], None]) == "FSDP"

    class Net:
        pass

    assert job_of([batch_source(Net()), LOADER_SOURCE]) == "script's own"
    assert job_of([BATCH_SOURCE["ddp"], BATCH_SOURCE["fsdp"]]) == "script's own"  # not one wrapper
    assert job_of([]) == "script's own"


def doc_rows() -> list[list[str]]:
    """The rows of docs/run-view.md's advice table (its header and rule left out)."""
    text = DOC.read_text()
    table = text.split("<!-- advice table: engine/run/figures/advice.py -->", 1)[1].split("\n\n", 1)[0]
    lines = [line for line in table.strip().splitlines() if line.startswith("|")][2:]
    return [[cell.strip() for cell in line.strip("|").split(" | ")] for line in lines]


def test_the_docs_give_the_same_table():
    def cell(text: str | None) -> str:
        return "nothing" if text is None else text.replace("|", "\\|")

    wanted = [
        [a.verdict, a.job, "the verdict's own" if a.says is None else a.says, cell(a.gpu), cell(a.cpu)]
        for a in ADVICE
    ]
    assert doc_rows() == wanted


def write_run(root: Path, mode: str, device: str, parts: dict[int, dict[str, float]]) -> Path:
    """A finished run's folder of ``mode`` on ``device``: its spec, and each rank's steps taken apart."""
    from test_hostile_folder import good_run

    path = good_run(root, f"20260101T000000Z-{mode}")
    document = json.loads((path / "spec.json").read_text())
    document["spec"] |= {"mode": mode, "device": device}
    (path / "spec.json").write_text(json.dumps(document))
    for rank, seconds in parts.items():
        lines = [
            encode(
                "hello",
                rank,
                1.0,
                {"local_rank": rank, "world_size": 2, "pid": 1, "host": "h", "device": device, "mode": mode},
            )
        ]
        for step in range(1, 21):
            t = 1.0 + step * sum(seconds.values())
            fields = {"step": step, "samples": 8, "step_s": sum(seconds.values()), "parts": seconds}
            lines.append(encode("step", rank, t, fields))
        (path / "events" / f"rank{rank}.jsonl").write_text("".join(lines))
    return path


def test_a_pipeline_replayed_is_told_of_its_stages_not_of_ddp_and_a_cpu_job_of_no_pinned_memory(tmp_path):
    """The issue's own: `run pipeline --schedule 1f1b` on the CPU, opened from its folder."""
    from mgpu_tui.engine.records.follow import FollowedRun

    comm = {"data": 0.0, "forward": 0.004, "backward": 0.01, "comm": 0.04, "optimizer": 0.0, "host": 0.0}
    run = FollowedRun(write_run(tmp_path, "pipeline", "cpu", {0: comm, 1: comm}))
    try:
        run.poll()
        (verdict,) = run.stats().verdicts
    finally:
        run.close()
    assert verdict.kind == "communication-bound"
    assert "the stages wait for each other's activations and gradients" in verdict.text
    assert "micro-batches" in (verdict.hint or "")
    assert not re.search(NOT_THERE["pipeline"], f"{verdict.text} {verdict.hint}")

    data = {"data": 0.05, "forward": 0.01, "backward": 0.0, "comm": 0.0, "optimizer": 0.0, "host": 0.0}
    run = FollowedRun(write_run(tmp_path / "ddp", "ddp", "cpu", {0: data, 1: data}))
    try:
        run.poll()
        (verdict,) = run.stats().verdicts
    finally:
        run.close()
    assert verdict.kind == "input-bound" and "num_workers" in (verdict.hint or "")
    assert "pin_memory" not in (verdict.hint or "")
