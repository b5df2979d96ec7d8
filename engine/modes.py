"""The catalogue of parallelism modes, as data.

Each mode names its demo module, how it is launched, how many devices each
rank uses, and whether its CPU path does the real thing or only goes through
the motions (DataParallel, say, only parallelises over CUDA devices).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from mgpu_tui.engine.host import Host

Launcher = Literal["torchrun", "python"]


@dataclass(frozen=True)
class Mode:
    name: str
    title: str
    demo: str  # module under mgpu_tui.demos
    launcher: Launcher
    devices_per_rank: int
    cpu_path: Literal["real", "degenerate"]
    teaches: str
    # Data-parallel ranks split the global batch, so it must divide evenly.
    splits_batch: bool = False

    @property
    def module(self) -> str:
        return f"mgpu_tui.demos.{self.demo}"

    @property
    def multi_process(self) -> bool:
        return self.launcher == "torchrun"


MODES: dict[str, Mode] = {
    m.name: m
    for m in (
        Mode(
            name="single",
            title="Single device (baseline)",
            demo="single",
            launcher="python",
            devices_per_rank=1,
            cpu_path="real",
            teaches="The plain training loop on one device: what every other mode must match.",
        ),
        Mode(
            name="ddp",
            title="DistributedDataParallel",
            demo="ddp",
            launcher="torchrun",
            devices_per_rank=1,
            cpu_path="real",
            teaches="One process per device, each on its slice of the batch; gradients all-reduced.",
            splits_batch=True,
        ),
    )
}


@dataclass(frozen=True)
class Availability:
    runnable: bool
    device: str | None  # the device "auto" picks here, when runnable
    reason: str


def availability(mode: Mode, host: Host) -> Availability:
    """Whether a mode can run on this host with --device auto, and why not."""
    if not host.torch_available:
        return Availability(False, None, "torch is not installed")
    if host.has_cuda:
        if host.gpu_count < mode.devices_per_rank:
            return Availability(
                False,
                None,
                f"needs {mode.devices_per_rank} GPUs per rank, {host.gpu_count} visible",
            )
        return Availability(True, "cuda", f"on {host.gpu_count} GPU(s) with NCCL")
    if mode.cpu_path == "degenerate":
        return Availability(True, "cpu", "runs on the CPU, but only the GPU path shows the idea")
    backend = " with gloo" if mode.multi_process else ""
    return Availability(True, "cpu", f"on the CPU{backend} ({host.gpu_note})")
