"""NVML, through ``pynvml`` from nvidia-ml-py: the one module that talks to it.

NVML is initialised lazily, on the first question, and once per process. A
machine without a driver is a normal state, not an error: every failure to
initialise becomes an :class:`NvmlStatus` with a plain-language reason.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from enum import Enum


class NvmlState(str, Enum):
    OK = "ok"
    NOT_INSTALLED = "not installed"  # the nvidia-ml-py package is missing
    LIBRARY_NOT_FOUND = "library not found"  # no libnvidia-ml.so: no driver here
    DRIVER_NOT_LOADED = "driver not loaded"
    MISMATCH = "driver/library mismatch"
    NO_PERMISSION = "no permission"
    ERROR = "error"


@dataclass(frozen=True)
class NvmlStatus:
    state: NvmlState
    detail: str
    device_count: int = 0
    driver_version: str | None = None

    @property
    def ok(self) -> bool:
        return self.state is NvmlState.OK


_lock = threading.Lock()
_status: NvmlStatus | None = None


def _classify(pynvml, exc: Exception) -> NvmlStatus:
    table = {
        "NVMLError_LibraryNotFound": (
            NvmlState.LIBRARY_NOT_FOUND,
            "the NVIDIA driver library (libnvidia-ml) is not installed",
        ),
        "NVMLError_DriverNotLoaded": (NvmlState.DRIVER_NOT_LOADED, "the NVIDIA driver is not loaded"),
        "NVMLError_LibRmVersionMismatch": (
            NvmlState.MISMATCH,
            "the NVIDIA driver and its library differ in version (reboot or reload the driver)",
        ),
        "NVMLError_NoPermission": (NvmlState.NO_PERMISSION, "no permission to query the NVIDIA driver"),
    }
    for name, (state, detail) in table.items():
        cls = getattr(pynvml, name, None)
        if cls is not None and isinstance(exc, cls):
            return NvmlStatus(state, detail)
    return NvmlStatus(NvmlState.ERROR, f"NVML failed: {exc}")


def status() -> NvmlStatus:
    """Initialise NVML if not done yet, and say what state it is in."""
    global _status
    with _lock:
        if _status is not None:
            return _status
        try:
            import pynvml
        except ImportError:
            _status = NvmlStatus(NvmlState.NOT_INSTALLED, "nvidia-ml-py is not installed")
            return _status
        try:
            pynvml.nvmlInit()
            count = pynvml.nvmlDeviceGetCount()
            driver = pynvml.nvmlSystemGetDriverVersion()
            if isinstance(driver, bytes):
                driver = driver.decode()
            _status = NvmlStatus(NvmlState.OK, f"{count} GPU(s), driver {driver}", count, driver)
        except pynvml.NVMLError as exc:
            _status = _classify(pynvml, exc)
        return _status


def _reset_for_tests() -> None:
    global _status
    with _lock:
        _status = None
