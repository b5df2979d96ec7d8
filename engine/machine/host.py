"""What this machine offers a run, found without importing torch.

The CLI and the app must stay light, so GPUs are counted through NVML and
CUDA_VISIBLE_DEVICES, and torch is only looked for, never imported.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Mapping
from dataclasses import dataclass

from mgpu_tui.engine.machine import nvml


@dataclass(frozen=True)
class Host:
    cpu_count: int
    gpu_count: int  # GPUs this process may use (after CUDA_VISIBLE_DEVICES)
    gpu_note: str  # why there are none, or what they are
    torch_available: bool

    @property
    def has_cuda(self) -> bool:
        return self.gpu_count > 0


def visible_gpu_count(physical: int, cuda_visible_devices: str | None) -> int:
    """How many GPUs CUDA will expose, given NVML's count and CUDA_VISIBLE_DEVICES.

    CUDA reads the list up to the first entry that is not a device (so "0,-1,1"
    exposes one GPU, and "" or "-1" none). Entries may be indices or UUIDs.
    """
    if cuda_visible_devices is None:
        return physical
    count = 0
    for entry in cuda_visible_devices.split(","):
        entry = entry.strip()
        if entry.isdigit():
            if int(entry) >= physical:
                break
        elif not entry.startswith(("GPU-", "MIG-")):
            break
        count += 1
    return min(count, physical)


def cpu_count() -> int:
    """CPUs this process may run on (the affinity mask, as in a container or under taskset)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def probe(environ: Mapping[str, str] | None = None) -> Host:
    environ = os.environ if environ is None else environ
    status = nvml.status()
    if status.ok:
        gpus = visible_gpu_count(status.device_count, environ.get("CUDA_VISIBLE_DEVICES"))
        note = status.detail
        if gpus != status.device_count:
            note += f"; {gpus} visible through CUDA_VISIBLE_DEVICES"
    else:
        gpus, note = 0, f"no NVIDIA GPU: {status.detail}"
    return Host(
        cpu_count=cpu_count(),
        gpu_count=gpus,
        gpu_note=note,
        torch_available=importlib.util.find_spec("torch") is not None,
    )
