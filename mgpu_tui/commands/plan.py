"""``mgpu-tui plan``: will a model fit, and under which mode? Each device's memory, part by part,
for every mode, before anything runs (engine/planning/memory.py). Reads the GPUs through NVML
when there are some; starts nothing."""

from __future__ import annotations

import argparse

from mgpu_tui.commands.workload import model_fields
from mgpu_tui.console import table
from mgpu_tui.engine.machine import nvml
from mgpu_tui.engine.planning.memory import ModePlan, Training, byte_split, plan
from mgpu_tui.engine.planning.shapes import ModelShape, ShapeError, model_shape
from mgpu_tui.engine.protocol.folder import dumps as strict_json
from mgpu_tui.errors import ExitCode, UsageError

GIB = 1 << 30


def _gib(n: int | None) -> str:
    return "n/a" if n is None else f"{n / GIB:,.1f}"


def _machine_gpus() -> tuple[int, int | None, str | None]:
    """(GPUs, the first one's memory in bytes, its name) as NVML sees them; (0, None, None) without."""
    status = nvml.status()
    if not status.ok or status.device_count == 0:
        return 0, None, None
    try:
        readings = nvml.readings(0, pcie=False)
        name = nvml.identity(0).name
    except (nvml.NvmlCallFailed, nvml.GpuLost):
        return status.device_count, None, None
    return status.device_count, readings.memory_total, name


def shape_from(args: argparse.Namespace) -> ModelShape:
    if args.model == "mlp":
        raise UsageError(
            "plan is for transformers: give --model gpt-tiny, gpt-125m, gpt-350m, gpt-1.3b, gpt-7b or custom."
        )
    try:
        return model_shape(args.model, **dict(model_fields(args)["model_args"]))
    except ShapeError as exc:
        raise UsageError(str(exc)) from None


def plan_command(args: argparse.Namespace) -> int:
    shape = shape_from(args)
    count, memory, name = _machine_gpus()
    gpus = args.gpus or count
    if not gpus:
        raise UsageError(
            "no GPU here: say how many to plan for with --gpus N (and their memory with --gpu-mem)."
        )
    gpu_mem = int(args.gpu_mem * GIB) if args.gpu_mem is not None else memory
    where = (
        f"--gpu-mem {args.gpu_mem:g} GiB"
        if args.gpu_mem is not None
        else f"{name}, {_gib(memory)} GiB (NVML)"
        if memory is not None
        else None
    )
    training = Training(
        optimizer=args.optimizer,
        amp=args.amp,
        batch_size=args.batch_size or gpus,
        microbatches=args.microbatches,
        schedule=args.schedule,
    )
    plans = plan(shape, gpus, training, gpu_mem)
    if args.json:
        print(
            strict_json(
                {
                    "model": shape.to_json(),
                    "gpus": gpus,
                    "gpu_mem_bytes": gpu_mem,
                    "gpu_mem_from": where,
                    "training": vars(training),
                    "bytes_per_parameter": byte_split(training),
                    "modes": [p.to_json() for p in plans],
                }
            )
        )
        return ExitCode.OK
    print(
        f"{shape.name}: {shape.params:,} parameters ({shape.layers} layers, d_model {shape.d_model}, "
        f"{shape.heads} heads, sequence {shape.seq_len}, vocabulary {shape.vocab:,}); "
        f"{shape.flops_per_token / 1e9:,.2f} GFLOP a token to train"
    )
    print(
        f"{gpus} GPU(s), {where or 'their memory unknown (give --gpu-mem GiB)'}; {training.optimizer}"
        f"{' with --amp' if training.amp else ', float32'}; global batch {training.batch_size} sequences "
        f"of {shape.seq_len} tokens"
    )
    split = byte_split(training)
    print(
        f"bytes a parameter, as torch keeps them: weights {split['weights']} (float32, their own master "
        f"copy), gradients {split['gradients']}, optimizer {split['optimizer']}"
        + (f", autocast's copy of a matmul weight {split['amp_copy']}" if training.amp else "")
    )
    print()
    print(plan_table(plans, amp=training.amp))
    print()
    print(
        "GiB on the fullest device of each mode. at rest: after the optimizer step (state and DDP's "
        "buckets); peak: as backward begins (+ in a unit's backward, * as backward ends); activations are "
        "an estimate "
        "(docs/compare.md#the-memory-planner)."
    )
    return ExitCode.OK


def plan_table(plans: list[ModePlan], amp: bool = False) -> str:
    """Each mode's fullest device, part by part, at rest and at its peak (``amp``: with autocast's
    copies); a peak in an FSDP unit's backward is marked ``+``, one as backward ends ``*``."""
    headers = ["mode", "GPUs", "fullest", "params", "grads", "optimizer", "activations", "buffers"]
    headers += ["amp copies"] if amp else []
    headers += ["at rest", "peak", "fits"]
    rows = []
    for p in plans:
        if not p.devices:
            rows.append([p.mode, str(p.gpus), *[""] * (len(headers) - 3), p.note or ""])
            continue
        d = max((d for d in p.devices if d.gpu), key=lambda d: d.total)
        fits = "n/a" if p.fits is None else "yes" if p.fits else "NO"
        parts = [d.params, d.grads, d.optimizer, d.activations, d.buffers] + ([d.amp_copies] if amp else [])
        peak = (
            _gib(d.total) + {"backward_begins": "", "unit_backward": "+", "backward_ends": "*"}[d.peak_moment]
        )
        rows.append([p.mode, str(p.gpus), d.device, *map(_gib, parts), _gib(d.at_rest), peak, fits])
    return table(headers, rows, right=tuple(range(3, len(headers) - 1)) + (1,))
