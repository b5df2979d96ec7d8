"""A week of a run's telemetry at 1 s, 8 GPUs and 8 ranks, through the run's own writer
(engine/run/figures/telemetry_log.py: its thinning and its cap), fed a sample a second of its clock
without waiting for it; then read back as the app does. Prints its figures as one JSON line.

    python bench/long_run/telemetry_week.py FOLDER
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

SECONDS = 7 * 24 * 3600
GPUS = RANKS = 8


def _snapshot(t: float, i: int):
    from mgpu_tui.engine.machine.nvml import NvmlState, NvmlStatus, Readings
    from mgpu_tui.engine.machine.telemetry import GpuSample, HostSample, RankProcess, Snapshot

    gpus = tuple(
        GpuSample(g, f"GPU-{g:08d}-0000-0000-0000-000000000000", "NVIDIA H100 80GB HBM3", False,
                  Readings(70_000_000_000 + i % 1000, 85_899_345_920, 97, 60, 71, 612.5, 700.0, 1980,
                           None, None, None, None, (), 10**9 + i * 600_000), None, None)
        for g in range(GPUS)
    )  # fmt: skip
    host = HostSample((55.0,) * 16, 120 << 30, 512 << 30, (8.0, 8.0, 8.0))
    ranks = tuple(RankProcess(r, 10_000 + r, True, 99.5, 14 << 30, 40, gpus[r].uuid) for r in range(RANKS))
    return Snapshot(t, NvmlStatus(NvmlState.OK, "ok", GPUS), gpus, host, ranks)


def main(folder: Path) -> dict:
    from mgpu_tui.engine.protocol.rundir import RunDir
    from mgpu_tui.engine.records.telemetry_read import TelemetrySeries
    from mgpu_tui.engine.run.figures.telemetry_log import TelemetryLog

    path = RunDir(folder).telemetry_path
    log = TelemetryLog(path, interval=1.0, ranks=dict)
    log._file = open(path, "a", encoding="utf-8")  # (what start() opens, without its sampler thread)
    t0 = time.time() - SECONDS
    for i in range(SECONDS):
        log._take(_snapshot(t0 + i, i))
    log._file.close()
    started, series = time.perf_counter(), TelemetrySeries()
    with open(path, encoding="utf-8") as f:
        for line in f:
            series.add(json.loads(line))
    return {
        "mb": path.stat().st_size / 1e6,
        "lines": log.kept,
        "read_s": time.perf_counter() - started,
        "points": len(series.t),
        "last_gap_s": series.t[-1] - series.t[-2],
    }


if __name__ == "__main__":
    print(json.dumps(main(Path(sys.argv[1]))))
