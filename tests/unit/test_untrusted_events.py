"""What a rank writes is checked against the job, and no line, however built, breaks the engine.

The fuzz test writes seeded random event files (valid events, broken ones, hostile ones:
huge numbers, wrong types, foreign ranks, binary, floods, FIFOs) into a real run
directory and reads them as a run does; the ingest must never raise, and the figures and
the summary only ever hold ranks of the job.
"""

import json
import os
import random

import pytest

from mgpu_tui.engine.launch.spec import LaunchSpec, resolve
from mgpu_tui.engine.machine.host import Host
from mgpu_tui.engine.protocol import events
from mgpu_tui.engine.protocol.folder import read_capped
from mgpu_tui.engine.protocol.rundir import RunDir
from mgpu_tui.engine.run.figures.aggregate import Aggregator
from mgpu_tui.engine.run.ingest import Ingest
from mgpu_tui.engine.run.summary import RunStatus, RunSummary

WORLD = 3
CPU = Host(cpu_count=2, gpu_count=0, gpu_note="no NVIDIA GPU", torch_available=True)


def line(kind, rank, **fields) -> bytes:
    return (
        json.dumps({"v": 1, "kind": kind, "rank": rank, "t": 1000.0 + fields.pop("dt", 0), **fields}) + "\n"
    ).encode()


def hello(rank, pid=1234, world_size=WORLD, **over):
    return line(
        "hello",
        rank,
        local_rank=rank,
        world_size=world_size,
        pid=pid,
        host="h",
        device="cpu",
        device_uuid=None,
        mode="ddp",
        config={},
        stacks=True,
        **over,
    )


def step(rank, n, samples=8, loss=1.0):
    return line(
        "step",
        rank,
        step=n,
        samples=samples,
        tokens=0,
        loss=loss,
        step_s=0.1,
        mem_bytes=1,
        mem_peak_bytes=1,
        dt=n,
    )


@pytest.fixture
def run_dir(tmp_path):
    run = RunDir.create(tmp_path, "ddp")
    run.events_dir.mkdir(parents=True, exist_ok=True)
    return run


def write(run_dir, file_rank, *lines):
    with open(run_dir.events_dir / f"rank{file_rank}.jsonl", "ab") as f:
        f.write(b"".join(lines))


def test_only_a_ranks_own_file_its_first_hello_and_the_jobs_world_size_count(run_dir):
    write(run_dir, 0, hello(0, pid=100), hello(0, pid=1), step(0, 1), step(1, 5), step(7, 5))
    write(run_dir, 1, hello(1, pid=101, world_size=99), step(1, 1))
    write(run_dir, 2, hello(2, pid=102), step(2, 1))
    write(run_dir, 7, hello(7, pid=107), step(7, 1, samples=10**9))  # no rank 7 in a job of 3
    ingest = Ingest(run_dir, WORLD)
    ingest.read()
    assert ingest.rank_processes() == {0: (100, None), 2: (102, None)}  # rank 1 lied about the job
    # Rank 0's second hello, its steps as ranks 1 and 7, rank 1's hello of a job of 99.
    assert ingest.malformed_events == 4
    assert ingest.foreign_files == {7}
    stats = ingest.stats()
    assert sorted(r.rank for r in stats.ranks) == [0, 1, 2] and stats.steps == 1


def test_a_second_hello_is_believed_only_when_torchrun_may_restart_the_rank(run_dir):
    write(run_dir, 0, hello(0, pid=100), hello(0, pid=200))
    ingest = Ingest(run_dir, WORLD, restarts=True)
    ingest.read()
    assert ingest.rank_processes()[0] == (200, None) and ingest.malformed_events == 0


def test_a_hello_after_the_ranks_end_is_its_later_phase_counting_on_from_its_steps(run_dir):
    """Lightning's ddp_spawn starts the ranks again for trainer.test: each says hello again once its
    first process said done. Its steps count on, and what its about leaves out stays the fit's."""
    about = line("about", 0, device="cpu", device_uuid=None, backend="gloo", batch=8, batch_source="DDP")
    write(run_dir, 0, hello(0, pid=100), about, step(0, 1), step(0, 2), line("done", 0, steps=2))
    later_about = line("about", 0, device="cpu", device_uuid=None, backend="gloo")
    write(run_dir, 0, hello(0, pid=200), later_about, step(0, 1, loss=0.5), line("done", 0, steps=1))
    ingest = Ingest(run_dir, WORLD)
    ingest.read()
    assert ingest.malformed_events == 0 and ingest.rank_processes()[0] == (200, None)
    (rank,) = ingest.stats().ranks
    assert rank.last_step == 3 and rank.loss == 0.5 and rank.batch == 8 and rank.done


def test_a_second_hello_before_the_ranks_end_is_not_believed(run_dir):
    write(run_dir, 0, hello(0, pid=100), step(0, 1), hello(0, pid=200), line("done", 0, steps=1))
    ingest = Ingest(run_dir, WORLD)
    ingest.read()
    assert ingest.malformed_events == 1 and ingest.rank_processes()[0] == (100, None)


def test_a_fifo_in_place_of_an_event_file_is_never_opened_for_reading(run_dir):
    os.mkfifo(run_dir.events_dir / "rank0.jsonl")  # no writer: a plain open() would block for ever
    write(run_dir, 1, hello(1), step(1, 1))
    ingest = Ingest(run_dir, WORLD)
    ingest.read()
    assert list(ingest.rank_processes()) == [1]
    with pytest.raises(OSError):
        read_capped(run_dir.events_dir / "rank0.jsonl", 100)


def test_read_capped_reads_at_most_its_limit_from_the_start_or_the_end(tmp_path):
    path = tmp_path / "big.log"
    path.write_bytes(b"a" * 1000 + b"\xff" + b"z" * 10)
    assert read_capped(path, 10) == "a" * 10
    assert read_capped(path, 11, tail=True) == "\ufffd" + "z" * 10  # not UTF-8: replaced, not raised


def test_nonfinite_and_unencodable_values_in_a_scripts_fields_never_make_the_reporter_raise():
    config = {"lr": float("inf"), "w": [float("nan")], "obj": object()}
    text = events.encode("hello", 0, 1.0, {"config": config})
    record = json.loads(text)  # strict JSON: no NaN, no Infinity
    assert record["config"]["lr"] == "inf" and record["config"]["w"] == ["nan"]
    assert record["config"]["obj"].startswith("<object object")
    done = json.loads(events.encode("done", 0, 1.0, {"steps": 3, "best": float("-inf")}))
    assert done["best"] == "-inf"


@pytest.mark.parametrize(
    "name, value",
    [
        ("step", 2**63),
        ("step", -1),
        ("samples", 1e400),
        ("step_s", float("inf")),
        ("mem_bytes", 2**80),
        ("step", True),
        ("rank", 10**12),
        ("t", float("nan")),
    ],
)
def test_numbers_out_of_range_are_malformed(name, value):
    record = json.loads(step(0, 1))
    record[name] = value
    with pytest.raises(events.MalformedEvent):
        events.parse_line(json.dumps(record))


# ---- the fuzz test ----------------------------------------------------------------------------

HOSTILE_VALUES = [
    None,
    True,
    -1,
    0,
    2**31,
    2**63,
    2**64 + 1,
    10**400,
    1e308,
    -1e308,
    "x" * 5000,
    "\x1b[2J",
    [],
    {},
    [1, 2],
    {"a": {"b": [None]}},
    0.5,
    -0.0,
]
KINDS = ["hello", "step", "done", "error", "nope", None, 7]
FIELDS = [
    "rank",
    "t",
    "step",
    "samples",
    "tokens",
    "loss",
    "step_s",
    "mem_bytes",
    "mem_peak_bytes",
    "pid",
    "world_size",
    "local_rank",
    "host",
    "device",
    "mode",
    "config",
    "stacks",
    "steps",
    "message",
    "traceback",
    "v",
    "kind",
]


def hostile_line(rng: random.Random) -> bytes:
    choice = rng.random()
    if choice < 0.30:  # a valid event, of this job or not
        rank = rng.choice([0, 1, 2, 2, 3, 9, 10**6])
        kind = rng.choice(["hello", "step", "step", "step", "done", "error"])
        if kind == "hello":
            return hello(rank, pid=rng.randint(1, 1 << 22), world_size=rng.choice([WORLD, WORLD, 1, 64]))
        if kind == "step":
            return step(
                rank,
                rng.randint(0, 1 << 40),
                samples=rng.randint(0, 1 << 30),
                loss=rng.choice([1.0, None, -3.5, 1e300]),
            )
        if kind == "done":
            return line("done", rank, steps=rng.randint(0, 100), extra={"x": rng.choice(HOSTILE_VALUES[:12])})
        return line("error", rank, message="\x1b]0;t\x07boom", traceback="tb")
    if choice < 0.70:  # a valid event with one field made hostile
        record = json.loads(step(rng.randint(0, 2), rng.randint(0, 50)))
        for _ in range(rng.randint(1, 3)):
            record[rng.choice(FIELDS)] = rng.choice(HOSTILE_VALUES)
        if rng.random() < 0.3:
            record["kind"] = rng.choice(KINDS)
        return (json.dumps(record) + "\n").encode()
    if choice < 0.80:  # numbers JSON allows and Python reads: NaN, Infinity, huge
        return rng.choice(
            [
                b'{"v":1,"kind":"step","rank":0,"t":NaN,"step":1}\n',
                b'{"v":1,"kind":"step","rank":0,"t":1,"step":1e999,"samples":1,"step_s":1}\n',
                b'{"v":1,"kind":"hello","rank":1,"t":Infinity}\n',
                b'{"v":1,"kind":"step","rank":0,"t":1,"step":' + b"9" * 5000 + b"}\n",
            ]
        )
    if choice < 0.90:  # bytes
        return bytes(rng.randrange(256) for _ in range(rng.randint(0, 300))) + b"\n"
    if choice < 0.95:  # deep nesting, a long line, no newline
        return rng.choice(
            [
                b"[" * 100000 + b"\n",
                b"{" + b'"a":' * 50 + b"\n",
                b'{"v":1,"kind":"step"' + b" " * (events.MAX_LINE_BYTES + 10) + b"}\n",
                b'{"v":1,"kind":"step","rank":0',
            ]
        )
    return b"\n" * rng.randint(1, 5)


@pytest.mark.parametrize("seed", range(12))
def test_fuzz_the_ingest_never_raises_and_the_summary_holds_only_the_jobs_ranks(run_dir, seed):
    rng = random.Random(seed)
    ingest = Ingest(run_dir, WORLD)
    lines_written = 0
    for _ in range(6):  # grown across several reads, as a live run's files are
        for file_rank in rng.sample([0, 1, 2, 3, 11], k=rng.randint(1, 5)):
            batch = [hostile_line(rng) for _ in range(rng.randint(1, 60))]
            write(run_dir, file_rank, *batch)
            lines_written += len(batch)
        ingest.read()
        stats = ingest.stats()
        assert {r.rank for r in stats.ranks} <= set(range(WORLD))
        assert set(ingest.rank_processes()) <= set(range(WORLD))
        assert 0 <= ingest.malformed_events <= lines_written + 10
        ingest.series()
        ingest.liveness()
    stats = ingest.stats()
    if stats.steps is not None:
        assert 0 <= stats.steps <= events.MAX_COUNT
    assert stats.samples_per_s is None or 0 <= stats.samples_per_s < float("inf")
    resolved = resolve(LaunchSpec("ddp", device="cpu", nproc=WORLD, batch_size=96), CPU)
    summary = RunSummary.build(
        resolved,
        str(run_dir.path),
        stats,
        status=RunStatus.OK,
        exit_code=0,
        root_cause=None,
        started_at=1000.0,
        ended_at=1100.0,
        malformed_events=ingest.malformed_events,
        verify=None,
        stall=None,
        pid_ok=lambda rank, pid: False,
    )
    assert [r.rank for r in summary.ranks] == sorted(r.rank for r in stats.ranks)
    assert summary.world_size == WORLD and len(summary.peak_mem_bytes) == WORLD
    assert all(r.pid is None for r in summary.ranks)
    # It is written and read back whatever came in (a diverged loss stays NaN or inf: true values).
    assert RunSummary.from_json(json.loads(json.dumps(summary.to_json()))).ranks == summary.ranks


def test_a_one_process_mode_names_no_backend_and_a_multi_process_mode_its_own():
    """single, dp, mp and hybrid make no process group: their summary's backend is null (the text
    says "no process group"), not the gloo a launch would have chosen (issue #31)."""
    from mgpu_tui.reports.run_summary import summary_text

    for mode, backend in (("single", None), ("dp", None), ("ddp", "gloo")):
        resolved = resolve(LaunchSpec(mode, device="cpu", nproc=2 if backend else None), CPU)
        summary = RunSummary.build(
            resolved,
            "/runs/x",
            Aggregator().stats(),
            status=RunStatus.OK,
            exit_code=0,
            root_cause=None,
            started_at=1000.0,
            ended_at=1100.0,
            malformed_events=0,
            verify=None,
            stall=None,
            pid_ok=lambda rank, pid: False,
        )
        assert summary.backend == backend, mode
        assert f"device cpu ({backend or 'no process group'})" in summary_text(summary)
