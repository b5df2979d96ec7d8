"""Compare runs from their records: yesterday's ddp against today's fsdp, nothing run again.

Each run directory gives a row as a live comparison would (comparison.row_from_run): its
summary, its spec, and its loss and throughput curves from its events. The runs must have
trained the same thing on the same kind of machine for the table to mean anything; where
they did not (another model, global batch, precision, device or machine), the comparison is
still made and says so, difference by difference.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

from mgpu_tui.engine.compare.comparison import (
    Comparison,
    Row,
    RunsSettings,
    build_row,
    devices_used,
    peak_flops,
    train_flops_per_sample,
)
from mgpu_tui.engine.launch.spec import LaunchSpec, workload_of
from mgpu_tui.engine.records.history import (
    RecordedMachine,
    RecordedSpec,
    RecordError,
    RecordStatus,
    read_run,
    read_spec,
)
from mgpu_tui.engine.run.figures.aggregate import read_events

# What must be the same for two runs' figures to be compared: (spec key, what it is called).
SAME_JOB = (
    ("model", "the model"),
    ("width", "the model's width"),
    ("depth", "the model's depth"),
    ("batch_size", "the global batch"),
    ("amp", "mixed precision"),
    ("device", "the device"),
)
SAME_MACHINE = (
    ("hostname", "the machine"),
    ("cpu_count", "the number of CPU cores"),
    ("gpu_count", "the number of GPUs"),
)


def comparison_from_runs(paths: Sequence[Path]) -> Comparison:
    """One row per run directory, in the order given; RecordError for one that has no result."""
    specs, rows = [], []
    for path in paths:
        spec, machine, row = _row(Path(path))
        specs.append((path, spec, machine))
        rows.append(row)
    if len({row.mode for row in rows}) < len(rows):  # yesterday's ddp against today's: name each by its run
        rows = [dataclasses.replace(r, label=_by_run(r.mode, Path(p).name)) for r, p in zip(rows, paths)]
    differences = _differences(specs)
    settings = RunsSettings(tuple(str(p) for p in paths), not differences, tuple(differences))
    comparison = Comparison("compare", settings, rows=rows)
    comparison.ended_at = comparison.started_at
    return comparison


def _by_run(mode: str, folder: str) -> str:
    """A row named by its run: the folder's name (which names the mode, as mgpu-tui makes them)."""
    return folder if mode in folder else f"{mode} {folder}"


def _workload(spec: RecordedSpec):
    """The recorded spec's model (an older record has no --model: the MLP)."""
    return workload_of(
        LaunchSpec(
            mode="single",
            width=spec.width or 0,
            depth=spec.depth or 0,
            model=spec.model or "mlp",
            model_args=spec.model_args,
        )
    )


def _row(path: Path) -> tuple[RecordedSpec, RecordedMachine | None, Row]:
    record = read_run(path)
    if record.status is RecordStatus.BROKEN:
        raise RecordError(f"{path} cannot be compared: {record.reason}.")
    if record.summary is None:
        raise RecordError(f"{path} has no result yet (no summary.json): it is still going, or was cut off.")
    spec, machine, _ = read_spec(path)
    summary = record.summary
    gpu_names = [g.name for g in summary.telemetry.gpus] if summary.telemetry else []
    devices = devices_used(
        str(spec.mode),
        spec.device,
        summary.world_size,
        spec.nproc or 1,
        spec.stages,
        (machine.gpu_count if machine else None) or 0,
    )
    flops = None if spec.program else train_flops_per_sample(_workload(spec))  # not a script's model
    events = read_events(path, summary.world_size)
    row = build_row(
        summary,
        mode=record.what,
        run_dir=str(path),
        devices=devices,
        flops_per_sample=flops,
        peak=peak_flops(gpu_names[0] if gpu_names else None, spec.amp) if spec.device == "cuda" else None,
        steady=events.series(),
        whole=events.whole_series(),
        batch_size=spec.batch_size or 0,
        lr=spec.lr,
    )
    return spec, machine, row


def _differences(specs: list[tuple[Path, RecordedSpec, RecordedMachine | None]]) -> list[str]:
    """One sentence per way the runs differ that makes their figures incomparable."""
    found = []
    unrecorded = [Path(path).name for path, _, machine in specs if machine is None]
    if unrecorded:  # made before runs recorded their machine: nothing can be said of it
        found.append(f"{', '.join(unrecorded)} does not record its machine (an older mgpu-tui made it)")
    for keys, of_spec in ((SAME_JOB, True), (SAME_MACHINE, False)):
        for key, name in keys:
            known = [(path, spec if of_spec else machine) for path, spec, machine in specs]
            values = [(path, getattr(record, key)) for path, record in known if record is not None]
            if len({value for _, value in values}) > 1:
                each = ", ".join(f"{Path(path).name}: {value}" for path, value in values)
                found.append(f"{name} differs ({each})")
    return found
