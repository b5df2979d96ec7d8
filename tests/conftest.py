"""Helpers shared by the tests: run the real CLI, and prove no process of a run survives."""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import pickle
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import psutil
import pytest
from waiting import wait_until

from mgpu_tui.engine.run.summary import RankSummary, RunStatus, RunSummary

CLI = [str(Path(sys.executable).with_name("mgpu-tui"))]
TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
TOPOLOGIES = TESTS / "fixtures" / "topology"  # real `nvidia-smi topo -m` outputs, with their sources

# make test runs two workers on two cores: one OpenMP thread per process, as torchrun gives
# each rank, so that idle OpenMP threads do not spin against the other worker's ranks.
os.environ.setdefault("OMP_NUM_THREADS", "1")
# A shell that starts a job in the background (`make test &`, nohup) ignores SIGINT in it, and
# children inherit an ignored signal: Python then never raises KeyboardInterrupt, and the tests
# that press Ctrl-C on mgpu-tui would wait for ever. A handled signal is reset to its default
# on exec instead, so the commands these tests start get Ctrl-C back.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
# The app's log goes under XDG_STATE_HOME: here, not in the user's home.
os.environ.setdefault("XDG_STATE_HOME", tempfile.mkdtemp(prefix="mgpu-tui-state-"))
# What torchrun's parser said of a line is kept (commands/launchers/torchrun_cache.py): here too.
os.environ.setdefault("MGPU_CACHE_DIR", tempfile.mkdtemp(prefix="mgpu-tui-cache-"))


T = TypeVar("T")


def once_per_session(tmp_path_factory, name: str, make: Callable[[Path], T]) -> T:
    """``make(folder)``'s result, made once however many xdist workers ask for it (a module fixture
    runs once on each worker its tests land on: two real runs where one does). The first worker
    makes it in a folder of this session's, under a lock; the others wait, then read it."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        return make(tmp_path_factory.mktemp(name))
    shared = tmp_path_factory.getbasetemp().parent  # this session's, beside each worker's own
    folder, result = shared / name, shared / f"{name}.pickle"
    with open(shared / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if result.exists():
            return pickle.loads(result.read_bytes())
        folder.mkdir(exist_ok=True)
        made = make(folder)
        result.write_bytes(pickle.dumps(made))
        return made


def run_cli(*args: str, timeout: float = 120, env=None, **kwargs) -> subprocess.CompletedProcess:
    """Run mgpu-tui; ``env`` (default: this process's) goes without torchrun's PET_* variables."""
    env = {k: v for k, v in (os.environ if env is None else env).items() if not k.startswith("PET_")}
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout, env=env, **kwargs)


def screen(session: str) -> str:
    """What a tmux session's terminal shows now."""
    done = subprocess.run(["tmux", "capture-pane", "-t", session, "-p"], capture_output=True, text=True)
    return done.stdout


def wait_screen(session: str, pattern: str, timeout: float = 20) -> bool:
    """Wait until the tmux session's screen matches ``pattern`` (a regular expression)."""
    return bool(wait_until(lambda: re.search(pattern, screen(session)), timeout, every=0.2))


def run_exec(
    tmp_path: Path, *command: str, ours=(), env=None, timeout: float = 120
) -> tuple[subprocess.CompletedProcess, Path]:
    """``mgpu-tui exec --json OURS -- COMMAND`` in tmp_path: what it printed, and its run folder
    (the one run under tmp_path/runs)."""
    runs = tmp_path / "runs"
    argv = [*CLI, "exec", "--run-dir", str(runs), "--json", *ours, "--", *command]
    return run_in(tmp_path, argv, env=env, timeout=timeout)


def run_in(
    tmp_path: Path, argv: list[str], env=None, timeout: float = 120
) -> tuple[subprocess.CompletedProcess, Path]:
    """``argv`` (an mgpu-tui launch whose --run-dir is tmp_path/runs), run in tmp_path: what it
    printed, and the one run folder it made there."""
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=tmp_path, env=env)
    return done, only_run_dir(tmp_path / "runs")


def cli_in_process(capsys, *args: str) -> tuple[int, str, str]:
    """``mgpu-tui ARGS`` run by calling its main() here: (exit code, stdout, stderr). No process starts."""
    from mgpu_tui.cli import main

    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def summary_from(output: str) -> RunSummary:
    """The run's summary from a command's output: its last line is the ``--json`` document."""
    return RunSummary.from_json(json.loads(output.strip().splitlines()[-1]))


def results_of(text: str) -> dict[int, dict]:
    """Each rank's ``RESULT {json}`` line, by rank: a test script's own account of its training,
    the truth mgpu-tui's figures are held to (found anywhere in a line: a launcher may prefix it)."""
    found = {}
    for line in text.splitlines():
        if "RESULT {" in line:
            result, _ = json.JSONDecoder().raw_decode(line, line.index("RESULT {") + 7)
            found[result["rank"]] = result
    return found


def read_summary(path: Path) -> RunSummary:
    return RunSummary.from_json(json.loads(path.read_text()))


def only_run_dir(root: Path) -> Path:
    runs = [p for p in root.iterdir() if p.is_dir()]
    assert len(runs) == 1, runs
    return runs[0]


def live_processes_of(run_dir: Path) -> list[psutil.Process]:
    """Processes still alive that belong to the run: tagged with its run id, or a rank's pid
    (from its hello, believed only for a process younger than the run)."""
    spec = json.loads((run_dir / "spec.json").read_text())
    run_id, created_at = spec["run_id"], spec["created_at"]
    pids = set()
    for events in (run_dir / "events").glob("rank*.jsonl"):
        for line in events.read_text().splitlines():
            record = json.loads(line)
            if record["kind"] == "hello":
                pids.add(record["pid"])
    alive = []
    for proc in psutil.process_iter():
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            # A hello's pid is a rank's word: only a process born after the run was made counts.
            born_in_run = proc.pid in pids and proc.create_time() >= created_at - 0.5
            if born_in_run or proc.environ().get("MGPU_RUN_ID") == run_id:
                alive.append(proc)
        except psutil.Error:
            continue
    return alive


@pytest.fixture
def runs_root(tmp_path: Path) -> Path:
    root = tmp_path / "runs"
    root.mkdir()
    return root


@pytest.fixture
def broken_nvml():
    """NVML as a broken driver presents it: it starts and counts GPUs, then every call fails."""
    from mgpu_tui.engine.machine import nvml
    from nvml_standin import nvml_failing_every_call

    nvml.use_library(nvml_failing_every_call())
    yield
    nvml.use_library(None)


# ---- the kinds of test: the folder says which --------------------------------------------

KINDS = {
    "unit": "no process started",
    "integration": "real processes: torchrun launches, the CLI",
    "app": "the Textual app: Pilot, snapshots, a real terminal",
    "frameworks": "real frameworks' own launch lines (make test-frameworks)",
    "models": "every mode against the baseline, the plan against torch's trackers (make test-models)",
}


def pytest_collection_modifyitems(config, items):
    for item in items:
        kind = Path(item.fspath).parent.name
        if kind in KINDS:
            item.add_marker(getattr(pytest.mark, kind))


@pytest.fixture(autouse=True)
def unit_tests_start_no_process(request, monkeypatch):
    """A unit test that starts a process fails at once: it belongs in tests/integration."""
    if request.node.get_closest_marker("unit") is None:
        return

    def refuse(self, *args, **kwargs):
        raise AssertionError(
            f"a unit test started a process ({args[0] if args else kwargs.get('args')}); "
            "move it to tests/integration"
        )

    monkeypatch.setattr(subprocess.Popen, "__init__", refuse)


def pinned_comparison():
    """A finished comparison of ddp, fsdp and pipeline on gpt-tiny, every figure pinned: what the
    Compare view shows after a run, drawn the same each time."""
    import math

    from mgpu_tui.engine.compare.comparison import CompareSettings, Comparison, Row
    from mgpu_tui.engine.run.summary_facts import RankMemory

    def row(mode: str, rate: float, peak: int, tensors: int, plan: int, loss_end: float) -> Row:
        losses = [[s, 5.6 - (5.6 - loss_end) * (1 - math.exp(-s / 15))] for s in range(1, 61)]
        rates = [[s, rate * (0.6 if s < 5 else 1.0 + 0.02 * math.sin(s))] for s in range(1, 61)]
        return Row(
            mode=mode,
            status=RunStatus.OK,
            world_size=2,
            devices=2,
            samples_per_s=rate,
            samples_per_s_per_device=rate / 2,
            tokens_per_s=rate * 64,
            step_time_s_median=64 / rate,
            step_time_s_p10_p90=[0.9 * 64 / rate, 1.2 * 64 / rate],
            tflops_per_device=None,
            mfu=None,
            peak_mem_bytes=peak,
            peak_mem_bytes_per_rank=[peak, peak - (3 << 20)],
            final_loss=loss_end,
            loss_curve=losses,
            throughput_curve=rates,
            duration_s=12.0,
            run_dir=f"runs/20261125T120000Z-{mode}",
            root_cause=None,
            note=None,
            memory=[RankMemory(r, 1_618_944, 1_618_944, plan, tensors, peak) for r in range(2)],
            batch_size=64,
            lr=0.02,
        )

    settings = CompareSettings(
        nproc=2,
        steps=60,
        batch_size=64,
        lr=0.02,
        device="cpu",
        amp=False,
        width=256,
        depth=4,
        model="gpt-tiny",
        model_shape=None,
        flops_per_sample=1.0e8,
        modes=("ddp", "fsdp", "pipeline"),
    )
    rows = [
        row("ddp", 1840.0, 402 << 20, 25 << 20, 26 << 20, 4.91),
        row("fsdp", 1210.0, 396 << 20, 19 << 20, 21 << 20, 4.91),
        row("pipeline", 960.0, 371 << 20, 14 << 20, 15 << 20, 4.92),
    ]
    return Comparison("compare", settings, rows, started_at=0.0, ended_at=40.0)


def pinned_summary(run_dir: Path, **changes) -> RunSummary:
    """A finished 2-rank ddp run's summary, every figure pinned; ``changes`` replace fields (a
    status by its value: "failed")."""
    rank = RankSummary(0, 10, 100.0, 0.5, 1 << 20, "cpu", os.getpid(), True)
    fields = dict(
        mode="ddp",
        program=None,
        status="ok",
        exit_code=0,
        device="cpu",
        backend="gloo",
        shared_gpus=False,
        world_size=2,
        nnodes=1,
        node_rank=0,
        steps=10,
        steps_requested=10,
        batch_size=64,
        samples_per_s=1000.0,
        step_time_s_median=0.01,
        step_time_s_p10_p90=(0.009, 0.02),
        final_loss=0.5,
        peak_mem_bytes=(1 << 20, 1 << 20),
        ranks=(rank, dataclasses.replace(rank, rank=1)),
        launch_to_first_step_s=1.0,
        duration_s=2.0,
        malformed_events=0,
        run_dir=str(run_dir),
        root_cause=None,
        note=None,
        verify=None,
        stall=None,
    )
    fields.update(changes)
    fields["status"] = RunStatus(fields["status"])
    return RunSummary(**fields)


# What a rank can write: quotes and braces that would end a Prometheus label, newlines that would
# start a sample of their own, backslashes, a terminal's escapes, and length (10,000 characters).
HOSTILE = 'x"} 1\nmgpu_rank_state{rank="0",mgpu_rank_state="done"} 1\n\\"\x1b[2J\\n'
LONG = ("evil " + HOSTILE) * (10_000 // len("evil " + HOSTILE) + 1)


def _event(kind: str, rank: int, **fields) -> str:
    return json.dumps({"v": 1, "kind": kind, "rank": rank, "t": time.time(), **fields}) + "\n"


def hostile_finished_run(root: Path) -> Path:
    """A finished 2-rank ddp run (10 steps, rank 1 failed first) whose ranks, who can write every
    file of it, wrote hostile text into everything they could: events, their summary's root cause
    (its kind too), the spec's host."""
    from mgpu_tui.engine.protocol.causes import RootCause

    path = root / "20260101T000000Z-ddp"
    (path / "events").mkdir(parents=True)
    spec = {"mode": "ddp", "world_size": 2, "nproc": 2, "steps": 10, "batch_size": 64, "amp": False}
    machine = {"hostname": HOSTILE, "cpu_count": 2, "gpu_count": 0}
    document = {"spec": {**spec, "device": "cpu", "model": "mlp"}, "created_at": 1.0, "machine": machine}
    (path / "spec.json").write_text(json.dumps(document))
    hello = dict(local_rank=0, world_size=2, pid=4242, host=HOSTILE, device=LONG[:1000])
    hello |= dict(device_uuid="GPU-" + HOSTILE, mode=HOSTILE, config={"x": LONG})
    step = dict(
        samples=8, tokens=0, loss=1.0, step_s=0.1, mem_bytes=1 << 20, mem_peak_bytes=1 << 21, data_s=0.01
    )
    for rank in (0, 1):
        lines = [
            _event("hello", rank, **hello),
            _event("about", rank, device=HOSTILE, device_uuid=HOSTILE, backend=HOSTILE, device_name=HOSTILE),
            *(_event("step", rank, step=s, **step) for s in range(1, 11)),
            _event("beat", rank, where=LONG[:1000]),
            _event("error", rank, message=LONG, traceback=LONG, type=HOSTILE, whole_message=LONG),
        ]
        (path / "events" / f"rank{rank}.jsonl").write_text("".join(lines))
    cause = RootCause(1, 1, None, LONG, LONG, hint=LONG, host=HOSTILE, kind=HOSTILE)
    summary = pinned_summary(path, status="failed", exit_code=1, root_cause=cause)
    (path / "summary.json").write_text(json.dumps(summary.to_json()))
    return path
