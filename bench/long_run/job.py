"""A synthetic week-long job, written by its ranks' own writer while a monitor follows it
(bench/long_run/__init__.py says what is measured). Prints its figures as one JSON line.

    python bench/long_run/job.py FOLDER STEPS
"""

from __future__ import annotations

import io
import json
import math
import multiprocessing
import resource
import sys
import time
from pathlib import Path

RANKS, WRITERS = 8, 4
STEP_S = 0.6  # of the job's own clock: 1,000,000 steps are a week
SLOW = 5  # a rank slower on its data (a straggler, as a real job has one)


def write_ranks(folder: str, ranks: list[int], steps: int, t0: float) -> None:
    """One writer process: its ranks' events, each step of each in turn, as fast as they go."""
    from mgpu_tui.engine.rank.reporter import Reporter

    reporters = [
        Reporter(rank=r, world_size=RANKS, run_dir=folder, print_every=10**9, stream=io.StringIO())
        for r in ranks
    ]
    for reporter in reporters:
        reporter.hello(mode="ddp", device="cpu", config={"steps": steps})
        reporter._last = t0
    for step in range(1, steps + 1):
        t = t0 + step * STEP_S
        for reporter in reporters:
            rank = reporter.rank
            jitter = 0.01 * math.sin(step * 0.37 + rank)
            data_s = 0.2 if rank == SLOW else 0.01
            parts = {"data": data_s, "forward": 0.12, "backward": 0.2, "comm": 0.05 + jitter,
                     "optimizer": 0.03, "host": 0.01}  # fmt: skip
            reporter.step(
                step,
                samples=32,
                tokens=32 * 1024,
                loss=3.0 / math.sqrt(step) + 0.01 * math.cos(step + rank),
                mem_bytes=(30 << 30) + step % 1000,
                mem_peak_bytes=(34 << 30) + step % 977,
                data_s=data_s,
                parts=parts,
                flops=3 * 10**15,
                at=t + jitter,
            )
    for reporter in reporters:
        reporter.done(steps)
        reporter.close()


def make_folder(root: Path, steps: int) -> Path:
    """A run folder as `mgpu-tui run ddp --nproc 8` makes it: its spec.json."""
    from mgpu_tui import __version__
    from mgpu_tui.engine.launch.spec import LaunchSpec, resolve
    from mgpu_tui.engine.machine import host as host_module
    from mgpu_tui.engine.protocol.rundir import RunDir

    resolved = resolve(
        LaunchSpec("ddp", nproc=RANKS, steps=steps, device="cpu", run_root=str(root)), host_module.probe()
    )
    run_dir = RunDir.create(root, "ddp")
    run_dir.write_json(
        run_dir.spec_path,
        {"spec": resolved.to_json(), "run_id": "bench", "argv": [], "env_changes": {},
         "created_at": time.time(), "mgpu_tui_version": __version__,
         "machine": {"hostname": "bench", "cpu_count": 16, "gpu_count": 8, "gpu_note": ""}},
    )  # fmt: skip
    return run_dir.path


def follow(folder: Path, writers: list) -> dict:
    """The monitor: reads what the ranks wrote as the engine's run thread does, and every 0.25 s takes
    the figures the app is sent (stats, the latest and the whole-run series); then the summary."""
    from mgpu_tui.engine.launch.spec import LaunchSpec, resolve
    from mgpu_tui.engine.machine import host as host_module
    from mgpu_tui.engine.protocol.rundir import RunDir
    from mgpu_tui.engine.run.ingest import Ingest
    from mgpu_tui.engine.run.summary import RunStatus, RunSummary

    run_dir = RunDir(folder)
    ingest = Ingest(run_dir, RANKS)
    started, cpu0, shown = time.time(), time.process_time(), 0.0
    while True:
        writing = any(w.is_alive() for w in writers)
        behind = ingest.read()
        if time.monotonic() >= shown:
            ingest.stats(), ingest.series(), ingest.whole_series()
            shown = time.monotonic() + 0.25
        if not behind:
            if not writing:  # (all written before this read, and all of it read)
                break
            time.sleep(0.05)
    stats = ingest.stats(fresh=True)
    cpu = time.process_time() - cpu0
    resolved = resolve(LaunchSpec("ddp", nproc=RANKS, steps=stats.steps, device="cpu"), host_module.probe())
    summary = RunSummary.build(
        resolved, str(folder), stats, status=RunStatus.OK, exit_code=0, root_cause=None,
        started_at=started, ended_at=time.time(), malformed_events=ingest.malformed_events,
    )  # fmt: skip
    run_dir.write_json(run_dir.summary_path, summary.to_json())
    ingest.close()
    return {"cpu_s": cpu, "steps_seen": stats.steps, "malformed": ingest.malformed_events}


def main(root: Path, steps: int) -> dict:
    folder = make_folder(root, steps)
    t0 = time.time() - steps * STEP_S
    share = RANKS // WRITERS
    shares = [list(range(w * share, (w + 1) * share)) for w in range(WRITERS)]
    writers = [
        multiprocessing.Process(target=write_ranks, args=(str(folder), ranks, steps, t0)) for ranks in shares
    ]
    began = time.monotonic()
    for w in writers:
        w.start()
    seen = follow(folder, writers)
    for w in writers:
        w.join()
    return {
        "folder": str(folder),
        "write_s": time.monotonic() - began,
        "monitor_peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "monitor_cpu_us_a_step": seen["cpu_s"] / (steps * RANKS) * 1e6,
        "steps_seen": seen["steps_seen"],
        "malformed": seen["malformed"],
    }


if __name__ == "__main__":
    print(json.dumps(main(Path(sys.argv[1]), int(sys.argv[2]))))
