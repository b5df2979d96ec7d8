"""Every run is a record: the machine during the run kept with it (telemetry.jsonl, the summary)."""

import dataclasses
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from waiting import wait_until

from conftest import CLI, TESTS, live_processes_of, only_run_dir, run_cli, summary_from
from mgpu_tui.engine.launch.processes import create_time
from mgpu_tui.engine.run.figures.telemetry_log import TelemetryLog
from mgpu_tui.engine.run.monitor import MonitorRecord, boot_id


def test_a_run_keeps_the_host_and_ranks_every_second_and_the_summary_says_what_they_used(runs_root):
    result = run_cli(
        "run",
        "ddp",
        "--nproc",
        "2",
        "--steps",
        "300",
        "--device",
        "cpu",
        "--run-dir",
        str(runs_root),
        "--json",
    )
    assert result.returncode == 0, result.stderr
    summary = summary_from(result.stdout)
    telemetry = (only_run_dir(runs_root) / "telemetry.jsonl").read_text()
    lines = [json.loads(line) for line in telemetry.splitlines()]
    times = [line["t"] for line in lines]
    # A host sample every second (the interval), from the start to the end of the run: no gap of
    # five intervals even on a busy machine, where the sampler's thread waits its turn for a core.
    assert len(lines) >= int(summary.duration_s) // 2 and max(b - a for a, b in zip(times, times[1:])) < 5
    assert all(line["host"]["mem_used"] > 0 for line in lines)
    pids = {rank["rank"]: rank["pid"] for line in lines for rank in line["ranks"]}
    assert pids == {r.rank: r.pid for r in summary.ranks}  # both ranks, by the pids the engine believes
    figures = summary.telemetry
    assert figures.samples >= len(lines) and figures.interval_s == 1.0
    assert 0 < figures.host_mean_cpu_percent <= 100 and figures.host_peak_mem_bytes > 0
    assert figures.gpus == ()  # no GPU here: nothing is invented
    assert [r.rank for r in figures.ranks] == [0, 1]
    # Each rank imported torch and trained: tens of MB, and a real share of a core.
    assert all(r.peak_rss_bytes > 50 << 20 and r.mean_cpu_percent > 10 for r in figures.ranks)


def test_sample_interval_0_keeps_no_telemetry(runs_root):
    result = run_cli(
        "run",
        "single",
        "--steps",
        "5",
        "--device",
        "cpu",
        "--sample-interval",
        "0",
        "--run-dir",
        str(runs_root),
        "--json",
    )
    assert result.returncode == 0, result.stderr
    assert summary_from(result.stdout).telemetry is None
    assert not (only_run_dir(runs_root) / "telemetry.jsonl").exists()


def test_a_long_runs_telemetry_stays_within_its_bounds(tmp_path):
    """The rule of a long run, at a fast interval: every sample of the first N, then one in K,
    and never more than the byte cap (the real sampler, on its own thread)."""
    path = tmp_path / "telemetry.jsonl"
    log = TelemetryLog(path, interval=0.1, ranks=dict, full_rate_samples=10, thin_every=4, max_bytes=10_000)
    log.start()
    wait_until(lambda: log.samples >= 34, 20, every=0.05)
    figures = log.stop()
    lines = path.read_text().splitlines()
    assert figures.samples >= 34
    assert len(lines) == log.kept == 10 + (figures.samples - 10) // 4  # 10, then one in 4
    assert path.stat().st_size <= 10_000

    capped = tmp_path / "capped.jsonl"
    log = TelemetryLog(capped, interval=0.1, ranks=dict, max_bytes=600)
    log.start()
    wait_until(lambda: log.samples >= 12, 30, every=0.05)
    log.stop()
    kept = capped.read_text().splitlines()
    assert json.loads(kept[-1])["end"] == "recording stopped at 600 bytes"
    assert sum(len(line) + 1 for line in kept[:-1]) <= 600 and log.samples > len(kept)


def test_the_runs_own_busy_processes_are_not_other_processes(tmp_path):
    """A rank's data-loader workers or a C++ build it waits on are the job's own work: they made
    every such run say BUSY MACHINE. Two logs sample side by side, on the same machine and the same
    load: the one that knows the run's processes (a busy child of the run) finds less "other" use
    than the one that knows only the ranks, by about what the child used."""
    child = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        created = create_time(child.pid)
        rank = {0: (os.getpid(), None)}  # this process, as the rank both know
        knows = TelemetryLog(
            tmp_path / "a.jsonl",
            interval=0.25,
            ranks=lambda: rank,
            run_processes=lambda: [(child.pid, created)],
        )
        blind = TelemetryLog(tmp_path / "b.jsonl", interval=0.25, ranks=lambda: rank)
        process = psutil.Process(child.pid)
        cpu_before, wall_before = sum(process.cpu_times()[:2]), time.monotonic()
        knows.start()
        blind.start()
        wait_until(lambda: min(knows.samples, blind.samples) >= 12, 30, every=0.1)
        ours, theirs = knows.stop().others_cpu_cores, blind.stop().others_cpu_cores
        child_cores = (sum(process.cpu_times()[:2]) - cpu_before) / (time.monotonic() - wall_before)
    finally:
        child.kill()
        child.wait(10)
    assert ours is not None and theirs is not None and child_cores > 0.2  # (on a loaded machine too)
    assert theirs - ours > 0.5 * child_cores, (theirs, ours, child_cores)  # the child's use, not "other"


def test_gpu_figures_come_from_nvml_and_energy_from_its_counter(tmp_path):
    """On the NVML stand-in of an 8-GPU H100 box (it answers as the real library does)."""
    sys.path.insert(0, str(TESTS))
    from mgpu_tui.engine.machine import nvml
    from mgpu_tui.engine.machine.topology import parse_topo_text
    from nvml_standin import machine_from_topology, standin

    text = (TESTS / "fixtures/topology/h100-sxm-8x-nvswitch.txt").read_text()
    machine = machine_from_topology(parse_topo_text(text), "NVIDIA H100 80GB HBM3", 80)
    for i, gpu in enumerate(machine.gpus):
        gpu.util, gpu.memory_used = 10 * i, (i + 1) << 30
    machine.gpus[7].unsupported.add("nvmlDeviceGetTotalEnergyConsumption")  # an older GPU: no counter
    nvml.use_library(standin(machine))
    try:
        log = TelemetryLog(tmp_path / "t.jsonl", interval=0.1, ranks=dict)
        log.start()
        time.sleep(1.5)
        figures = log.stop()
    finally:
        nvml.use_library(None)
    gpus = {Path(g.uuid).name: g for g in figures.gpus}
    assert len(gpus) == 8
    g3 = figures.gpus[3]
    assert g3.peak_mem_bytes == 4 << 30 and g3.mean_util_percent == 30
    assert g3.mean_power_w == g3.peak_power_w == 70 + 5 * 30  # the stand-in draws 70 W + 5 W per % of use
    # Energy from the counter: power x the time between the first and the last sample.
    span = figures.samples * 0.1
    assert 0.5 * 220 * (span - 0.3) < g3.energy_j < 220 * (span + 0.3)
    assert figures.gpus[7].energy_j is None  # no counter: null, not a guess
    line = json.loads((tmp_path / "t.jsonl").read_text().splitlines()[-1])
    assert [g["i"] for g in line["gpus"]] == list(range(8)) and line["gpus"][7]["energy_mj"] is None


def test_runs_lists_past_runs_newest_first_and_the_broken_ones_as_broken(runs_root):
    for mode in ("single", "mp"):
        done = run_cli(
            "run",
            mode,
            "--steps",
            "5",
            "--device",
            "cpu",
            "--run-dir",
            str(runs_root),
            "--sample-interval",
            "0",
        )
        assert done.returncode in (0, 1), done.stderr
    (runs_root / "not-a-run").mkdir()
    half = runs_root / "20200101T000000Z-ddp"
    half.mkdir()
    (half / "spec.json").write_text('{"spec": {"mode": "ddp", "world_size": 2}, "created_at": 1}')
    (half / "summary.json").write_text('{"mode": "ddp", "sta')  # its writer died mid-way
    going = runs_root / "20200102T000000Z-fsdp"
    going.mkdir()
    (going / "spec.json").write_text('{"spec": {"mode": "fsdp", "world_size": 4}, "created_at": 2}')

    result = run_cli("runs", "--run-dir", str(runs_root), "--json")
    assert result.returncode == 0, result.stderr
    runs = json.loads(result.stdout)["runs"]
    assert [r["what"] for r in runs] == ["mp", "single", "fsdp", "ddp", "?"]  # newest first
    mp, single, fsdp, ddp, other = runs
    assert single["status"] == "ok" and single["steps"] == 5 and single["samples_per_s"] > 0
    assert single["final_loss"] == summary_from_file(Path(single["path"])).final_loss
    assert fsdp["status"] == "unfinished" and fsdp["world_size"] == 4
    assert ddp["status"] == "broken" and ddp["reason"].startswith("summary.json: not JSON")
    assert other["status"] == "broken" and other["reason"] == "no spec.json: not a run directory"

    table = run_cli("runs", "--run-dir", str(runs_root))
    assert table.returncode == 0 and "unfinished" in table.stdout and "broken" in table.stdout


def summary_from_file(path: Path):
    from conftest import read_summary

    return read_summary(path / "summary.json")


def test_compare_runs_from_their_records_gives_their_own_figures(runs_root, tmp_path):
    """How long it takes is bench's (bench/run.py compare: goal < 2 s), not a timed test's."""
    for mode in ("ddp", "fsdp"):
        done = run_cli(
            "run",
            mode,
            "--nproc",
            "2",
            "--steps",
            "40",
            "--device",
            "cpu",
            "--run-dir",
            str(runs_root),
            "--sample-interval",
            "0",
        )
        assert done.returncode == 0, done.stderr
    ddp, fsdp = sorted(runs_root.iterdir())
    out = tmp_path / "r.json"

    result = run_cli("compare", "--runs", str(ddp), str(fsdp), "--out", str(out))
    assert result.returncode == 0, result.stderr
    report = json.loads(out.read_text())
    assert report["settings"]["comparable"] and report["settings"]["differences"] == []
    for row, path in zip(report["rows"], (ddp, fsdp)):
        own = summary_from_file(path)
        assert (row["mode"], row["samples_per_s"], row["final_loss"]) == (
            own.mode,
            own.samples_per_s,
            own.final_loss,
        )
        assert row["loss_curve"][-1] == [own.steps, own.final_loss]

    # Another global batch: the fsdp run's record, as a run with batch 32 would have written it.
    other = tmp_path / "other"
    shutil.copytree(fsdp, other)
    spec = json.loads((other / "spec.json").read_text())
    spec["spec"]["batch_size"] = 32
    (other / "spec.json").write_text(json.dumps(spec))
    mixed = run_cli("compare", "--runs", str(ddp), str(other), "--json")
    assert mixed.returncode == 0, mixed.stderr
    assert "not comparable: the global batch differs" in mixed.stderr
    assert json.loads(mixed.stdout)["settings"]["comparable"] is False

    # Yesterday's ddp against today's (issue #31): each row, line and bar is named by its run.
    yesterday = tmp_path / "20200101T000000Z-ddp"
    shutil.copytree(ddp, yesterday)
    again = run_cli("compare", "--runs", str(yesterday), str(ddp), "--out", str(tmp_path / "same.md"))
    assert again.returncode == 0, again.stderr
    names = [yesterday.name, ddp.name]
    for name in names:  # in the table, the loss and throughput lines, the bars
        assert again.stdout.count(name) >= 4, again.stdout
    report = (tmp_path / "same.md").read_text()
    assert all(name in report for name in names)
    assert (tmp_path / "same.png").stat().st_size > 10_000
    rows = json.loads(run_cli("compare", "--runs", str(yesterday), str(ddp), "--json").stdout)["rows"]
    assert [(r["mode"], r["label"]) for r in rows] == [("ddp", name) for name in names]


def test_compare_runs_refuses_a_run_without_a_result_in_one_sentence(runs_root):
    going = runs_root / "20200102T000000Z-fsdp"
    going.mkdir(parents=True)
    (going / "spec.json").write_text('{"spec": {"mode": "fsdp", "world_size": 4}, "created_at": 2}')
    result = run_cli("compare", "--runs", str(going), str(going) + "/")
    assert result.returncode == 2
    assert result.stderr.strip().endswith(
        "has no result yet (no summary.json): it is still going, or was cut off."
    )


def test_a_finished_run_replays_from_its_files_as_its_summary_says(runs_root):
    from mgpu_tui.engine.records.follow import FollowedRun, FollowState

    done = run_cli(
        "run",
        "ddp",
        "--nproc",
        "2",
        "--steps",
        "40",
        "--device",
        "cpu",
        "--run-dir",
        str(runs_root),
        "--sample-interval",
        "0.2",
        "--json",
    )
    assert done.returncode == 0, done.stderr
    summary = summary_from(done.stdout)
    run = FollowedRun(Path(summary.run_dir))
    assert not run.live_at_open and run.monitor() is None  # nobody follows a finished run
    assert run.poll() is FollowState.OK and run.summary == summary
    stats = run.stats()
    assert stats.steps == summary.steps == 40
    assert [r.last_step for r in stats.ranks] == [r.last_step for r in summary.ranks]
    steps, _, losses = run.series()
    assert steps[-1] == 40 and losses[-1] == pytest.approx(summary.final_loss)
    lines, _ = run.drain_log_lines()
    assert any(rank == 1 and "step 40" in line for rank, _, line in lines)
    kept = (Path(summary.run_dir) / "telemetry.jsonl").read_text().splitlines()
    assert len(run.telemetry.t) == len(kept) == summary.telemetry.samples >= 2
    assert all(v is not None for v in run.telemetry.host_cpu[1:])  # the first sample has no rate yet
    again, nproc = run.launch_spec()
    assert (again.mode, again.steps, again.device, nproc) == ("ddp", 40, "cpu", 2)
    run.close()


def test_a_live_run_is_known_by_its_monitors_lock_and_a_killed_monitor_leaves_it_cut_off(runs_root):
    from mgpu_tui.engine.records.follow import FollowedRun, FollowState

    monitor = subprocess.Popen(
        [
            *CLI,
            "run",
            "ddp",
            "--nproc",
            "2",
            "--steps",
            "100000",
            "--device",
            "cpu",
            "--run-dir",
            str(runs_root),
        ],
        stdout=subprocess.DEVNULL,
    )
    try:
        run_dir = wait_for_a_step(runs_root)
        run = FollowedRun(run_dir)
        assert run.live_at_open and run.poll() is FollowState.RUNNING
        found = run.monitor()
        assert (found.pid, found.is_mgpu_tui, found.owned) == (monitor.pid, True, True)
        assert found.why_not_stoppable() is None
        listed = json.loads(run_cli("runs", "--run-dir", str(runs_root), "--json").stdout)["runs"]
        assert listed[0]["status"] == "running"

        monitor.kill()  # no summary can be written now; the keeper takes the ranks down with it
        monitor.wait(10)
        assert wait_until(lambda: not live_processes_of(run_dir), 15, every=0.2)
        assert run.poll() is FollowState.CUT_OFF and run.summary is None and run.monitor() is None
        listed = json.loads(run_cli("runs", "--run-dir", str(runs_root), "--json").stdout)["runs"]
        assert listed[0]["status"] == "cut off"
        with pytest.raises(ProcessLookupError):
            run.stop()
        run.close()
    finally:
        monitor.kill()
        monitor.wait(10)


def test_a_lock_held_by_a_process_of_a_run_is_never_sent_a_signal(runs_root):
    """A rank could replace the lock file with one it locks itself: the engine must not take
    the lock's holder for the run's monitor and signal it."""
    from mgpu_tui.engine.records.follow import FollowedRun

    run_dir = runs_root / "20200101T000000Z-ddp"
    run_dir.mkdir()
    spec = {"spec": {"mode": "ddp", "world_size": 2}, "created_at": 1}
    (run_dir / "spec.json").write_text(json.dumps(spec))
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, sys, time; f = open(sys.argv[1], 'a'); "
            "fcntl.flock(f, fcntl.LOCK_EX); print('locked', flush=True); time.sleep(60)",
            str(run_dir / "monitor.lock"),
            "mgpu_tui",
        ],
        env={**os.environ, "MGPU_RUN_ID": "someone-elses-run"},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        # it even records itself as the monitor would: its own pid, start time, boot and host
        MonitorRecord(holder.pid, create_time(holder.pid), boot_id(), socket.gethostname()).write(
            run_dir / "monitor.lock"
        )
        run = FollowedRun(run_dir)
        assert run.live_at_open
        found = run.monitor()
        assert found.pid == holder.pid and not found.is_mgpu_tui and found.holds_this_lock
        with pytest.raises(PermissionError, match="not an mgpu-tui monitor"):
            run.stop()
        assert holder.poll() is None  # nothing was sent to it
        run.close()
    finally:
        holder.kill()
        holder.wait(10)


HOLD = (
    "import sys, time; from mgpu_tui.engine.run.monitor import MonitorLock; "
    "assert MonitorLock(__import__('pathlib').Path(sys.argv[1])).hold(); print('locked', flush=True); "
    "time.sleep(60)"
)


def a_followed_run(root: Path, name: str, env: dict | None = None) -> tuple[Path, subprocess.Popen]:
    """A run folder whose lock is held by an mgpu-tui process that recorded itself, as a monitor does
    (``env``: more of its environment)."""
    run_dir = root / name
    (run_dir / "events").mkdir(parents=True)
    spec = {"spec": {"mode": "ddp", "world_size": 2}, "created_at": 1}
    (run_dir / "spec.json").write_text(json.dumps(spec))
    env = {**{k: v for k, v in os.environ.items() if k != "MGPU_RUN_ID"}, **(env or {})}
    argv = [sys.executable, "-c", HOLD, str(run_dir / "monitor.lock")]
    holder = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "locked"
    return run_dir, holder


def test_only_the_monitor_a_run_recorded_is_sent_a_stop_and_only_through_a_pidfd(runs_root):
    """Issue #28: a rank hard-links its monitor.lock to another run's and copies that run's record:
    the other run's monitor holds its own folder's lock, not this one, and is sent nothing. A record
    naming another host, a pid's other start time, or a monitor other than the one the user said yes
    to: nothing is sent. The run's own monitor is stopped, through a pidfd."""
    from mgpu_tui.engine.records.follow import FollowedRun

    a, monitor_a = a_followed_run(runs_root, "20200101T000000Z-ddp")
    b, monitor_b = a_followed_run(runs_root, "20200101T000001Z-ddp")
    hostile = runs_root / "20200101T000002Z-ddp"
    (hostile / "events").mkdir(parents=True)
    (hostile / "spec.json").write_text((a / "spec.json").read_text())
    os.link(a / "monitor.lock", hostile / "monitor.lock")  # the same file, by a second name
    (hostile / "monitor.json").write_text((a / "monitor.json").read_text())
    try:
        run = FollowedRun(hostile)
        found = run.monitor()
        assert found.pid == monitor_a.pid and found.is_mgpu_tui and not found.holds_this_lock
        with pytest.raises(PermissionError, match="follows another run"):
            run.stop()
        mine = FollowedRun(b)
        ok = mine.monitor()
        assert ok.pid == monitor_b.pid and ok.why_not_stoppable() is None
        record = MonitorRecord.read(b / "monitor.lock")
        for changed, says in (
            (dataclasses.replace(record, host="login1", boot_id="other"), "runs on login1, not on this"),
            (dataclasses.replace(record, start=record.start + 1), "not the monitor the run recorded"),
        ):
            changed.write(b / "monitor.lock")
            with pytest.raises(PermissionError, match=says):
                mine.stop()
        (b / "monitor.json").unlink()
        with pytest.raises(PermissionError, match="left no record of itself"):
            mine.stop()
        record.write(b / "monitor.lock")
        with pytest.raises(PermissionError, match="no longer the process you were asked about"):
            mine.stop(dataclasses.replace(ok, start=ok.start - 1))  # the user said yes to another
        assert monitor_a.poll() is None and monitor_b.poll() is None  # nothing was sent to either
        mine.stop(ok)
        assert monitor_b.wait(10) == -signal.SIGTERM
        assert monitor_a.poll() is None
        run.close()
        mine.close()
    finally:
        for holder in (monitor_a, monitor_b):
            holder.kill()
            holder.wait(10)


def wait_for_a_step(runs_root: Path, timeout: float = 60) -> Path:
    """The only run folder under runs_root, once a rank has reported its first step."""

    def stepped() -> Path | None:
        for events in runs_root.glob("*/events/rank0.jsonl"):
            if '"kind":"step"' in events.read_text():
                return events.parent.parent
        return None

    run = wait_until(stepped, timeout, every=0.2)
    if run is not None:
        return run
    raise AssertionError(f"no run under {runs_root} reached a step in {timeout} s")


def test_a_named_run_ends_its_folders_name_with_it_and_the_listings_show_it(runs_root):
    """Issue #31: runs can be named. --name is a NAME (never a path), after the mode in the folder's
    name, recorded in spec.json, and shown by `runs` (text and JSON)."""
    done = run_cli(
        "run", "single", "--steps", "3", "--device", "cpu", "--run-dir", str(runs_root), "--name", "baseline"
    )
    assert done.returncode == 0, done.stderr
    (run_dir,) = runs_root.iterdir()
    assert run_dir.name.endswith("-single-baseline")
    assert json.loads((run_dir / "spec.json").read_text())["spec"]["name"] == "baseline"
    listed = json.loads(run_cli("runs", "--run-dir", str(runs_root), "--json").stdout)["runs"]
    assert [(r["what"], r["name"]) for r in listed] == [("single", "baseline")]
    assert "baseline: single" in run_cli("runs", "--run-dir", str(runs_root)).stdout


SLURM = {"job_id": "4242", "step_id": 0, "restart_count": 0, "nodelist": "node7", "nnodes": 1, "node_id": 0,
         "ntasks": 1, "tasks_per_node": 1, "procid": 0, "localid": 0}  # fmt: skip


def test_a_slurm_job_named_only_by_the_runs_folder_is_never_cancelled(runs_root, monkeypatch):
    """Issue #40: a rank of a local run writes "slurm": {"job_id": "4242"} into spec.json (and a
    monitor.json that claims the job): `s` asked to cancel job 4242, and scancel ran. The job is
    believed only as the lock's holder itself runs in it (its own environment, read from /proc);
    with that, the same folder's job may be cancelled."""
    from mgpu_tui.engine.records.follow import FollowedRun

    run_dir, local = a_followed_run(runs_root, "20200101T000000Z-ddp")
    spec = json.loads((run_dir / "spec.json").read_text())
    spec["spec"]["slurm"] = SLURM
    (run_dir / "spec.json").write_text(json.dumps(spec))
    in_the_job, holder = a_followed_run(runs_root, "20200101T000001Z-ddp", env={"SLURM_JOB_ID": "4242"})
    (in_the_job / "spec.json").write_text(json.dumps(spec))
    asked = []
    monkeypatch.setattr("mgpu_tui.engine.records.follow.cancel_job", asked.append)
    try:
        run = FollowedRun(run_dir)
        assert run.recorded_spec.slurm.job_id == "4242"
        assert "runs in no Slurm job, so Slurm job 4242 was not cancelled" in run.why_not_cancellable()
        forged = dataclasses.replace(MonitorRecord.read(run_dir / "monitor.lock"), slurm_job="4242")
        forged.write(run_dir / "monitor.lock")  # the rank's own word for its monitor: no better
        assert "runs in no Slurm job" in run.cancel_slurm_job()
        remote = dataclasses.replace(forged, host="node7", boot_id="other")
        remote.write(run_dir / "monitor.lock")  # a monitor "on another host": the holder is here
        assert "runs in no Slurm job" in run.cancel_slurm_job()
        assert asked == []
        real = FollowedRun(in_the_job)
        assert real.why_not_cancellable() is None
        assert real.cancel_slurm_job() is None and asked == ["4242"]
        local.kill()
        local.wait(10)
        assert run.why_not_cancellable() == "nothing follows this run any more: it has ended."
        run.close()
        real.close()
    finally:
        for process in (local, holder):
            process.kill()
            process.wait(10)


async def test_s_in_the_app_on_a_folder_that_only_names_a_slurm_job_asks_nothing_and_says_why(runs_root):
    """The app's side of the rule above: `s` on a followed local run whose spec.json a rank filled
    with a job id never asks to cancel that job; the reason comes in a notification (the check,
    which may ask Slurm, runs off the UI thread)."""
    from mgpu_tui.app import create_app
    from mgpu_tui.app.views.confirm import Confirm

    run_dir, local = a_followed_run(runs_root, "20200101T000000Z-ddp")
    spec = json.loads((run_dir / "spec.json").read_text())
    spec["spec"]["slurm"] = SLURM
    (run_dir / "spec.json").write_text(json.dumps(spec))
    app = create_app(telemetry=[], topology=None, run_root=runs_root)
    try:
        async with app.run_test(size=(160, 50)) as pilot:
            await app.open_run(run_dir)
            await pilot.pause(0.5)
            await pilot.press("s")
            said = []
            for _ in range(50):
                await pilot.pause(0.1)
                said = [str(n.message) for n in app._notifications]
                if any("Slurm job 4242 was not cancelled" in m for m in said):
                    break
            assert any("runs in no Slurm job, so Slurm job 4242 was not cancelled" in m for m in said), said
            assert not isinstance(app.screen, Confirm)
    finally:
        local.kill()
        local.wait(10)
