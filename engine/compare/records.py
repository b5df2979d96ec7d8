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
    rate = summary.samples_per_s
    per_device = rate / devices if rate is not None and devices else None
    flops = None if spec.program else train_flops_per_sample(_workload(spec))  # not a script's model
    tflops = per_device * flops / 1e12 if per_device and flops else None
    peak = peak_flops(gpu_names[0] if gpu_names else None, spec.amp) if spec.device == "cuda" else None
    events = read_events(path, summary.world_size)
    steps, rates, _ = events.series()
    loss_steps, _, losses = events.whole_series()
    peaks = [p for p in summary.peak_mem_bytes if p is not None]
    row = Row(
        mode=record.what,
        status=summary.status,
        world_size=summary.world_size,
        devices=devices,
        samples_per_s=rate,
        samples_per_s_per_device=per_device,
        tokens_per_s=summary.tokens_per_s,
        step_time_s_median=summary.step_time_s_median,
        step_time_s_p10_p90=list(summary.step_time_s_p10_p90) if summary.step_time_s_p10_p90 else None,
        tflops_per_device=tflops,
        mfu=tflops * 1e12 / peak if tflops and peak else None,
        peak_mem_bytes=max(peaks) if peaks else None,
        peak_mem_bytes_per_rank=list(summary.peak_mem_bytes),
        final_loss=summary.final_loss,
        loss_curve=[[s, v] for s, v in zip(loss_steps, losses) if v is not None],
        throughput_curve=[[s, r] for s, r in zip(steps, rates)],
        duration_s=summary.duration_s,
        run_dir=str(path),
        root_cause=summary.root_cause.headline() if summary.root_cause else None,
        note=summary.note,
        memory=list(summary.memory),
        tokens_per_s_per_device=summary.tokens_per_s / devices if summary.tokens_per_s and devices else None,
        batch_size=spec.batch_size or 0,
        lr=spec.lr,
        busy=summary.telemetry.busy if summary.telemetry else None,
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
