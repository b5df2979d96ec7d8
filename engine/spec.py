"""The launch spec: what the user asked for, checked against this host.

:func:`resolve` turns a :class:`LaunchSpec` into a :class:`ResolvedSpec` (device
and backend decided) or raises :class:`SpecError` (the user asked for something
that cannot be: exit code 2) or :class:`EnvironmentUnusable` (this machine cannot
run anything: exit code 3). Each carries one sentence meant for the user.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from mgpu_tui.engine.host import Host
from mgpu_tui.engine.modes import MODES, Mode

Device = Literal["auto", "cpu", "cuda"]
DEVICES = ("auto", "cpu", "cuda")


class SpecError(ValueError):
    """The request is invalid: a usage error."""


class EnvironmentUnusable(RuntimeError):
    """This environment cannot run a mode at all (torch missing, say)."""


@dataclass(frozen=True)
class LaunchSpec:
    mode: str
    nproc: int | None = None  # None: one per GPU on CUDA, 2 on the CPU, 1 for one-process modes
    steps: int = 100
    batch_size: int = 64  # the global batch: every rank together
    device: Device = "auto"
    run_root: Path = Path("runs")
    # Further arguments for the demo (--lr 0.1, --amp, ...), passed through as given.
    demo_args: tuple[str, ...] = ()


@dataclass(frozen=True)
class ResolvedSpec:
    spec: LaunchSpec
    mode: Mode
    device: Literal["cpu", "cuda"]
    backend: Literal["gloo", "nccl"]
    world_size: int = field(init=False)

    def __post_init__(self) -> None:
        world = self.spec.nproc if self.mode.multi_process else 1
        object.__setattr__(self, "world_size", world)

    def to_json(self) -> dict:
        spec = dataclasses.asdict(self.spec)
        spec["run_root"] = str(self.spec.run_root)
        spec["demo_args"] = list(self.spec.demo_args)
        return {
            **spec,
            "device": self.device,
            "device_requested": self.spec.device,
            "backend": self.backend,
            "launcher": self.mode.launcher,
            "world_size": self.world_size,
        }


def mode_names() -> str:
    return ", ".join(MODES)


def resolve(spec: LaunchSpec, host: Host) -> ResolvedSpec:
    mode = MODES.get(spec.mode)
    if mode is None:
        raise SpecError(f"unknown mode {spec.mode!r}; the modes are: {mode_names()}.")
    for name, value in (("--nproc", spec.nproc), ("--steps", spec.steps), ("--batch-size", spec.batch_size)):
        if value is not None and value < 1:
            raise SpecError(f"{name} must be at least 1, got {value}.")
    if spec.device not in DEVICES:
        raise SpecError(f"--device must be one of {', '.join(DEVICES)}, got {spec.device!r}.")
    if not mode.multi_process and spec.nproc not in (None, 1):
        raise SpecError(f"mode {mode.name!r} runs as one process; drop --nproc or pass --nproc 1.")
    if not host.torch_available:
        raise EnvironmentUnusable("torch is not installed in this Python environment (see the README).")

    device = spec.device
    if device == "auto":
        device = "cuda" if host.has_cuda else "cpu"
    if spec.nproc is None:
        if not mode.multi_process:
            nproc = 1
        elif device == "cuda":
            nproc = max(1, host.gpu_count // mode.devices_per_rank)
        else:
            nproc = 2
        spec = dataclasses.replace(spec, nproc=nproc)
    if device == "cuda":
        if not host.has_cuda:
            raise SpecError(f"--device cuda needs an NVIDIA GPU, but there is none here ({host.gpu_note}).")
        needed = (spec.nproc if mode.multi_process else 1) * mode.devices_per_rank
        if needed > host.gpu_count:
            raise SpecError(
                f"mode {mode.name!r} with --nproc {spec.nproc} needs {needed} GPUs, "
                f"but {host.gpu_count} are visible."
            )
    if mode.splits_batch and spec.batch_size % spec.nproc:
        raise SpecError(
            f"--batch-size {spec.batch_size} does not split evenly over {spec.nproc} ranks; "
            f"use a multiple of {spec.nproc}."
        )
    return ResolvedSpec(spec, mode, device, "nccl" if device == "cuda" else "gloo")
