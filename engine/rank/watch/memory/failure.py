"""An out-of-memory, as the rank sees it when the exception leaves the script: which it is (torch's
CPU allocator, CUDA's), the phase it happened in (the step clock's: forward, backward, optimizer,
data; else between them), the step, the accounting at that moment (nothing else is needed: most
out-of-memory errors come at step 1, before any step was observed), the allocation that failed,
what the rank had in use, and its capacity (an address-space limit, a cgroup's limit, the GPU's).
It reads sizes and files only; it allocates no tensor."""

from __future__ import annotations

import os
import re
import resource
from typing import Any

CPU_ALLOCATOR = "DefaultCPUAllocator: can't allocate memory"
_TRIED = re.compile(r"tried to allocate (\d+) bytes|Tried to allocate ([\d.]+) (B|KiB|MiB|GiB)")
_UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}


def kind_of(exc: BaseException) -> str | None:
    """ "cpu" for torch's CPU allocator's error, "cuda" for CUDA's out of memory; None otherwise."""
    try:
        text = str(exc)
    except Exception:  # noqa: BLE001
        return None
    if type(exc).__name__ == "OutOfMemoryError" or "CUDA out of memory" in text:
        return "cuda"
    return "cpu" if CPU_ALLOCATOR in text else None


def request_bytes(text: str) -> int | None:
    """The allocation that failed, as the allocator's message says it."""
    found = _TRIED.search(text)
    if found is None:
        return None
    if found[1] is not None:
        return int(found[1])
    return int(float(found[2]) * _UNITS[found[3]])


def _status(field: str) -> int | None:
    """A figure of /proc/self/status in bytes (VmSize, VmRSS)."""
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f.read(64 << 10).decode(errors="replace").splitlines():
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def address_space() -> int | None:
    """The process's virtual size now (what RLIMIT_AS limits)."""
    return _status("VmSize")


def cpu_capacity() -> tuple[int | None, str | None, int | None]:
    """(capacity, what it is, in use): the address-space limit where one is set (against the virtual
    size), else the cgroup's memory.max (against the resident set), else neither."""
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY:
        return int(soft), "its address-space limit (RLIMIT_AS)", address_space()
    try:
        with open("/proc/self/cgroup", "rb") as f:
            group = f.read(4096).decode(errors="replace").strip().split("::", 1)[-1]
        with open(os.path.join("/sys/fs/cgroup", group.lstrip("/"), "memory.max"), "rb") as f:
            limit = f.read(64).decode().strip()
        if limit != "max":
            return int(limit), "its cgroup's memory.max", _status("VmRSS")
    except (OSError, ValueError):
        pass
    return None, None, _status("VmRSS")


def fields(torch: Any, kind: str, exc: BaseException, device: Any) -> dict[str, Any]:
    """What the error event says of the out-of-memory, beside its accounting and phase."""
    said: dict[str, Any] = {"kind": kind, "request_bytes": request_bytes(str(exc))}
    if kind == "cuda" and device is not None and device.type == "cuda":
        said["capacity_bytes"] = int(torch.cuda.get_device_properties(device).total_memory)
        said["capacity_of"] = "the GPU's memory"
        said["in_use_bytes"] = int(torch.cuda.memory_reserved(device))
    else:
        said["capacity_bytes"], said["capacity_of"], said["in_use_bytes"] = cpu_capacity()
    return said
