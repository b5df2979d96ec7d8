"""A job of many nodes followed from the folder they share (bench/run.py's ``large-job``; issue 45).

A synthetic job of N ranks on N / 8 nodes: a real shared run folder (each node's own spec file, as
``mgpu-tui run --nnodes`` writes it), held live by a monitor lock as a running job's is, and every
rank's events written in the protocol's format at a real step rate (2 steps a second) by 4 writer
processes. One rank stops after its 10th step (a hang); one rank spends 0.3 s of each 0.5 s step
on its data (a straggler). The login node's view of it is the real app, opened on the folder (as
``mgpu-tui open``), run under Pilot in this process. Measured, for N = 64, 256 and 1,024: the
app's CPU (its process: every thread) and peak RSS over the run, the longest time its Run view
went without a new step while the job moved (the refresh), and how long after the hung rank's
last event the view called it stalled, naming its node, and how long until the slow rank was named.
Goals (the issue's, for 1,024 ranks on 128 nodes): under one core and 200 MB, a refresh at least
every 2 s, the stall named within the stall timeout + 5 s, the slow rank named.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mgpu_tui.engine.protocol.rundir import RunDir

PER_NODE = 8
STEP_S = 0.5
HUNG_AT = 10  # the hung rank's last step
WRITERS = 4
SECONDS = 60.0  # how long the view is watched (the stall timeout, 30 s, and its margin)


def _ranks_of(writer: int, world: int) -> range:
    share = world // WRITERS
    return range(writer * share, world if writer == WRITERS - 1 else (writer + 1) * share)


def _write(folder: str, writer: int, world: int, hung: int, slow: int, until: float) -> None:
    """One writer process: its share of the ranks' events, a step every STEP_S for each."""
    files = {r: open(RunDir(folder).events_path(r), "a", buffering=1) for r in _ranks_of(writer, world)}  # noqa: SIM115
    now = time.time()
    for rank, f in files.items():
        hello = {"v": 1, "kind": "hello", "rank": rank, "t": now, "local_rank": rank % PER_NODE,
                 "world_size": world, "pid": 100000 + rank, "host": f"gpu-node-{rank // PER_NODE:03d}",
                 "device": "cpu", "device_uuid": None, "mode": "ddp", "config": {}}  # fmt: skip
        f.write(json.dumps(hello) + "\n")
    step, started = 0, time.monotonic()
    while time.monotonic() < until:
        step += 1
        now = time.time()
        for rank, f in files.items():
            if rank == hung and step > HUNG_AT:
                continue
            data_s = 0.3 if rank == slow else 0.01
            event = {"v": 1, "kind": "step", "rank": rank, "t": now, "step": step, "samples": 16, "tokens": 0,
                     "loss": 2.0 - step / 1000, "step_s": STEP_S, "mem_bytes": 300 << 20,
                     "mem_peak_bytes": 320 << 20, "data_s": data_s}  # fmt: skip
            f.write(json.dumps(event) + "\n")
        time.sleep(max(0.0, started + step * STEP_S - time.monotonic()))
    for f in files.values():
        f.close()


def _follow(folder: str, until: float) -> None:
    """The job's monitor, as far as its folder shows: a process holding its lock (a lock is the
    process's own, so not the app's)."""
    from mgpu_tui.engine.run.monitor import MonitorLock

    lock = MonitorLock(RunDir(folder, 0).monitor_lock_path)  # node 0's, where the app looks first
    lock.hold()
    time.sleep(max(0.0, until - time.monotonic()))
    lock.release()


def _job_folder(root: Path, nodes: int) -> Path:
    """The shared folder, as the nodes of `mgpu-tui run --nnodes` make it: each node's spec file."""
    from mgpu_tui import __version__
    from mgpu_tui.engine.launch.spec import LaunchSpec, resolve
    from mgpu_tui.engine.machine import host as host_module
    from mgpu_tui.engine.protocol.rundir import RunDir

    host = host_module.probe()
    run_dir = None
    for node in range(nodes):
        spec = LaunchSpec(
            "ddp",
            nproc=PER_NODE,
            nnodes=nodes,
            node_rank=node,
            steps=100_000,
            device="cpu",
            rdzv_endpoint="127.0.0.1:29400",
            rdzv_id="bench-large-job",
            run_root=str(root),
        )
        resolved = resolve(spec, host)
        run_dir = RunDir.create(root, "ddp", node=node, shared=spec.rdzv_id)
        run_dir.write_json(
            run_dir.spec_path,
            {
                "spec": resolved.to_json(),
                "run_id": "bench",
                "argv": [],
                "env_changes": {},
                "created_at": time.time(),
                "mgpu_tui_version": __version__,
                "machine": {
                    "hostname": f"gpu-node-{node:03d}",
                    "cpu_count": 16,
                    "gpu_count": 8,
                    "gpu_note": "",
                },
            },
        )
    assert run_dir is not None
    return run_dir.path


def measure(world: int) -> dict:
    from mgpu_tui.app import create_app
    from mgpu_tui.app.views.run.view import RunView

    nodes = world // PER_NODE
    hung, slow = world * 3 // 10 + 5, world * 7 // 10 + 2
    with tempfile.TemporaryDirectory() as tmp:
        folder = _job_folder(Path(tmp) / "runs", nodes)
        until, began = time.monotonic() + SECONDS + 5, time.monotonic()  # the job's start
        writers = [
            multiprocessing.Process(target=_write, args=(str(folder), w, world, hung, slow, until))
            for w in range(WRITERS)
        ]
        writers.append(multiprocessing.Process(target=_follow, args=(str(folder), until)))
        for w in writers:
            w.start()
        figures: dict = {"ranks": world, "nodes": nodes}
        app = create_app(open_run=folder, run_root=Path(tmp) / "runs")

        async def watch() -> None:
            async with app.run_test(size=(160, 50)) as pilot:
                cpu0, started = time.process_time(), time.monotonic()
                last_step, last_change, longest = -1, started, 0.0
                hung_seen = slow_seen = None
                while time.monotonic() - started < SECONDS:
                    await pilot.pause(0.25)
                    view = app.query_one(RunView)
                    stats = view._stats
                    now = time.monotonic()
                    newest = max((r.last_step for r in stats.ranks), default=0) if stats else 0
                    if newest != last_step:  # the furthest rank's step (the job's waits for the hung one)
                        if last_step > 0:
                            longest = max(longest, now - last_change)
                        last_step, last_change = newest, now
                    first = view.rank_table.node_order[0] if view.rank_table.node_order else None
                    if hung_seen is None and first and first.worst and first.worst[0] == hung:
                        if first.worst[1] == "stalled":
                            hung_seen = now - began
                    if slow_seen is None and any(
                        r.worst and r.worst[0] == slow and r.worst[1] == "slow"
                        for r in view.rank_table.node_order
                    ):
                        slow_seen = now - began
                figures["cpu_cores"] = (time.process_time() - cpu0) / (time.monotonic() - started)
                figures["longest_without_refresh_s"] = longest
                figures["hung_named_after_s"] = hung_seen
                figures["hung_last_event_at_s"] = HUNG_AT * STEP_S
                figures["slow_named_after_s"] = slow_seen
                figures["first_row"] = None if not view.rank_table.node_order else (
                    view.rank_table.node_order[0].view.node, view.rank_table.node_order[0].worst
                )  # fmt: skip

        asyncio.run(watch())
        figures["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        for w in writers:
            w.join(timeout=30)
    return figures


def bench_large_job(sizes: tuple[int, ...] = (64, 256, 1024)) -> tuple[str, list[tuple[str, str]]]:
    rows = []
    for world in sizes:
        # Each size in a fresh process: the peak RSS is its own, and nothing of the last is warm.
        done = subprocess.run(
            [sys.executable, __file__, str(world)], capture_output=True, text=True, timeout=SECONDS * 4
        )
        if done.returncode != 0:
            rows.append((f"{world} ranks", f"failed: {(done.stderr.strip().splitlines() or ['?'])[-1]}"))
            continue
        got = json.loads(done.stdout.strip().splitlines()[-1])
        name = f"{world} ranks on {got['nodes']} nodes"
        hung, slow = got["hung_named_after_s"], got["slow_named_after_s"]
        rows += [
            (f"{name}: the app's CPU (cores)", f"{got['cpu_cores']:.2f}"),
            (f"{name}: its peak RSS", f"{got['peak_rss_mb']:.0f} MB"),
            (f"{name}: the longest wait for a new step shown", f"{got['longest_without_refresh_s']:.1f} s"),
            (
                f"{name}: the hung rank called stalled, its node first",
                "never" if hung is None else f"{hung - got['hung_last_event_at_s']:.1f} s after its last",
            ),
            (f"{name}: the slow rank named", "never" if slow is None else f"after {slow:.1f} s"),
        ]  # fmt: skip
    title = "large-job: the login view of a job of many nodes (goals at 1,024: < 1 core, < 200 MB, 2 s, +5 s)"
    return title, rows


# ---- the same job's metrics (--metrics-port): its exposition, and the monitor's cost when scraped ----

QUIET_S, SCRAPED_S = 20.0, 20.0  # the monitor alone, then scraped every second
PROMETHEUS_ACCEPT = (  # what Prometheus 2.42 asks for
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
    "text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
)


def _scrape(url: str, start_at: float, stop_at: float, results) -> None:  # noqa: ANN001
    """A scraper in a process of its own, once a second as Prometheus would (gzip, OpenMetrics);
    then once bare (text format, not compressed): (seconds each, gzipped bytes, raw bytes)."""
    import urllib.request

    time.sleep(max(0.0, start_at - time.time()))
    took, gzipped = [], 0
    while time.time() < stop_at:
        began = time.perf_counter()
        headers = {"Accept": PROMETHEUS_ACCEPT, "Accept-Encoding": "gzip"}
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=30) as answer:
            gzipped = len(answer.read())
        took.append(time.perf_counter() - began)
        time.sleep(max(0.0, 1.0 - (time.perf_counter() - began)))
    with urllib.request.urlopen(url, timeout=30) as answer:
        raw = answer.read()
    results.put((took, gzipped, len(raw), raw.count(b"\n")))


def measure_metrics(world: int) -> dict:
    """The monitor of `mgpu-tui open --metrics-port` without the app: the job followed from its
    folder (records/follow.py, polled every 0.25 s as the app's run thread does) and its snapshot
    published after each poll; QUIET_S seconds alone, then SCRAPED_S scraped every second."""
    import statistics

    from prometheus_client import generate_latest
    from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics

    from mgpu_tui.engine.metrics.server import MetricsServer
    from mgpu_tui.engine.records.follow import FollowedRun

    nodes = world // PER_NODE
    hung, slow = world * 3 // 10 + 5, world * 7 // 10 + 2
    with tempfile.TemporaryDirectory() as tmp:
        folder = _job_folder(Path(tmp) / "runs", nodes)
        total = 5 + QUIET_S + SCRAPED_S
        until = time.monotonic() + total + 5
        jobs = [
            multiprocessing.Process(target=_write, args=(str(folder), w, world, hung, slow, until))
            for w in range(WRITERS)
        ]
        jobs.append(multiprocessing.Process(target=_follow, args=(str(folder), until)))
        server = MetricsServer(0, linger_s=0)
        server.start()
        results: multiprocessing.Queue = multiprocessing.Queue()
        began = time.time()
        scraped_from, scraped_to = began + 5 + QUIET_S, began + total
        jobs.append(
            multiprocessing.Process(target=_scrape, args=(server.url, scraped_from, scraped_to, results))
        )
        for job in jobs:
            job.start()
        run = FollowedRun(folder)
        cpu: dict[str, float] = {}
        publish: dict[str, list[float]] = {"quiet": [], "scraped": []}
        while time.time() < scraped_to:
            phase = "quiet" if time.time() < scraped_from else "scraped"
            if time.time() >= began + 5 and "quiet" not in cpu:
                cpu["quiet"] = time.process_time()
            if phase == "scraped" and "scraped" not in cpu:
                cpu["scraped"] = time.process_time()
            run.poll()
            t0 = time.perf_counter()
            server.publish(run)
            publish[phase].append(time.perf_counter() - t0)
            time.sleep(0.25)
        cpu["end"] = time.process_time()
        took, gzipped, raw, lines = results.get(timeout=60)
        render = {}  # the CPU one scrape's answer costs, alone (the last snapshot, in this process)
        for name, encode in (("text", generate_latest), ("openmetrics", generate_openmetrics)):
            began_cpu = time.process_time()
            encode(server.registry)
            render[name] = time.process_time() - began_cpu
        server.close()
        run.close()
        for job in jobs:
            job.join(timeout=30)
    return {
        "ranks": world,
        "nodes": nodes,
        "raw_bytes": raw,
        "lines": lines,
        "gzipped_bytes": gzipped,
        "scrape_s_median": statistics.median(took),
        "scrape_s_max": max(took),
        "scrapes": len(took),
        "cpu_quiet": (cpu["scraped"] - cpu["quiet"]) / QUIET_S,
        "cpu_scraped": (cpu["end"] - cpu["scraped"]) / SCRAPED_S,
        "render_s_text": render["text"],
        "render_s_openmetrics": render["openmetrics"],
        "publish_ms_max_quiet": max(publish["quiet"]) * 1000,
        "publish_ms_max_scraped": max(publish["scraped"]) * 1000,
    }


def bench_metrics(sizes: tuple[int, ...] = (64, 1024)) -> tuple[str, list[tuple[str, str]]]:
    rows = []
    for world in sizes:
        done = subprocess.run(
            [sys.executable, __file__, "metrics", str(world)],
            capture_output=True,
            text=True,
            timeout=(QUIET_S + SCRAPED_S) * 4,
        )
        if done.returncode != 0:
            rows.append((f"{world} ranks", f"failed: {(done.stderr.strip().splitlines() or ['?'])[-1]}"))
            continue
        got = json.loads(done.stdout.strip().splitlines()[-1])
        name = f"{world} ranks"
        raw, gzipped = f"{got['raw_bytes'] / 1024:.0f} KiB", f"{got['gzipped_bytes'] / 1024:.0f} KiB"
        scrape = f"{got['scrape_s_median'] * 1000:.0f} ms ({got['scrape_s_max'] * 1000:.0f} ms)"
        publish = f"{got['publish_ms_max_quiet']:.0f} ms / {got['publish_ms_max_scraped']:.0f} ms"
        render = f"{got['render_s_text'] * 1000:.0f} ms / {got['render_s_openmetrics'] * 1000:.0f} ms"
        rows += [
            (f"{name}: the exposition, raw (text format)", f"{raw}, {got['lines']:,} lines"),
            (f"{name}: the exposition, gzipped (as Prometheus asks)", gzipped),
            (f"{name}: a scrape, median (max) of {got['scrapes']}", scrape),
            (f"{name}: one answer's CPU alone, text / OpenMetrics", render),
            (f"{name}: the monitor's CPU, not scraped (cores)", f"{got['cpu_quiet']:.2f}"),
            (f"{name}: the monitor's CPU, scraped every second (cores)", f"{got['cpu_scraped']:.2f}"),
            (f"{name}: a snapshot taken, longest (not scraped / scraped)", publish),
        ]  # fmt: skip
    title = (
        "metrics: the large job's exposition and its monitor scraped every second (goal at 1,024: <= 1 core)"
    )
    return title, rows


if __name__ == "__main__":
    if sys.argv[1] == "metrics":
        print(json.dumps(measure_metrics(int(sys.argv[2]))))
    else:
        print(json.dumps(measure(int(sys.argv[1]))))
