"""NVML, through ``pynvml`` from nvidia-ml-py: the one module that talks to it.

NVML is initialised lazily, on the first question, and once per process. A
machine without a driver is a normal state, not an error: every failure to
initialise becomes an :class:`NvmlStatus` with a plain-language reason.

Every query below returns plain values. A field the GPU does not support (or
that the driver refuses) is ``None``, which the UI shows as "n/a"; a GPU that
fell off the bus raises :class:`GpuLost` so the caller can mark it lost and go on.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from enum import Enum
from types import ModuleType


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


class GpuLost(RuntimeError):
    """The GPU stopped answering (fell off the bus, or was reset)."""


class NvmlCallFailed(RuntimeError):
    """NVML refused a call for a reason other than "not supported": a broken driver, say."""


_lock = threading.Lock()
_status: NvmlStatus | None = None
_lib: ModuleType | None = None  # pynvml, or a stand-in that behaves like it (tests, benches)
_handles: dict[int, object] = {}


def use_library(module: ModuleType | None) -> None:
    """Use ``module`` instead of pynvml from now on (a stand-in where no GPU exists); None resets."""
    global _status, _lib
    with _lock:
        _status, _lib = None, module
        _handles.clear()


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


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def status() -> NvmlStatus:
    """Initialise NVML if not done yet, and say what state it is in."""
    global _status, _lib
    with _lock:
        if _status is not None:
            return _status
        if _lib is None:
            try:
                import pynvml
            except ImportError:
                _status = NvmlStatus(NvmlState.NOT_INSTALLED, "nvidia-ml-py is not installed")
                return _status
            _lib = pynvml
        try:
            _lib.nvmlInit()
            count = _lib.nvmlDeviceGetCount()
            driver = _text(_lib.nvmlSystemGetDriverVersion())
            _status = NvmlStatus(NvmlState.OK, f"{count} GPU(s), driver {driver}", count, driver)
        except _lib.NVMLError as exc:
            _status = _classify(_lib, exc)
        return _status


def lib() -> ModuleType:
    """The initialised library; call only when :func:`status` is ok."""
    assert _lib is not None and _status is not None and _status.ok, "NVML is not available"
    return _lib


def _handle(index: int):
    handle = _handles.get(index)
    if handle is None:
        handle = _handles[index] = _call(lib().nvmlDeviceGetHandleByIndex, index, required=True)
    return handle


def _call(fn, *args, required: bool = False):
    """Call an NVML function: NotSupported (and friends) -> None; a lost GPU -> GpuLost;
    any other NVML error -> NvmlCallFailed, which names the call."""
    n = lib()
    try:
        return fn(*args)
    except n.NVMLError_GpuIsLost as exc:
        raise GpuLost(str(exc)) from None
    except n.NVMLError as exc:
        unsupported = (n.NVMLError_NotSupported, n.NVMLError_NoPermission, n.NVMLError_NotFound)
        if not required and (
            isinstance(exc, unsupported) or isinstance(exc, getattr(n, "NVMLError_FunctionNotFound", ()))
        ):
            return None
        raise NvmlCallFailed(f"{getattr(fn, '__name__', 'an NVML call')} failed: {exc}") from None


# ---- identity ----------------------------------------------------------------------


@dataclass(frozen=True)
class GpuIdentity:
    index: int
    uuid: str
    name: str
    pci_bus_id: str


def identity(index: int) -> GpuIdentity:
    n, h = lib(), _handle(index)
    pci = _call(n.nvmlDeviceGetPciInfo, h)
    return GpuIdentity(
        index=index,
        uuid=_text(_call(n.nvmlDeviceGetUUID, h, required=True)),
        name=_text(_call(n.nvmlDeviceGetName, h) or "unknown"),
        pci_bus_id=_text(pci.busId) if pci is not None else "",
    )


# ---- live readings -------------------------------------------------------------------


@dataclass(frozen=True)
class Readings:
    """One GPU's instantaneous readings; None means not supported here."""

    memory_used: int | None
    memory_total: int | None
    util_gpu: int | None  # percent
    util_memory: int | None
    temperature_c: int | None
    power_w: float | None
    power_limit_w: float | None
    sm_clock_mhz: int | None
    pcie_tx_bps: float | None
    pcie_rx_bps: float | None
    nvlink_tx_bytes: int | None  # cumulative counters: rates come from two readings
    nvlink_rx_bytes: int | None
    processes: tuple[tuple[int, int | None], ...]  # (pid, GPU memory used)
    # The GPU's energy counter since the driver loaded (Volta and later): a run's joules are the
    # difference of two readings. None where the GPU has no counter.
    energy_mj: int | None = None


def readings(index: int, pcie: bool = True) -> Readings:
    """One GPU's readings. ``pcie=False`` leaves the PCIe rates None: NVML measures them over a
    20 ms window and each of the two calls blocks that long (20.6 ms on an H100, driver 580),
    where every other field here answers in microseconds."""
    n, h = lib(), _handle(index)
    memory = _memory(n, h)
    util = _call(n.nvmlDeviceGetUtilizationRates, h)
    power = _call(n.nvmlDeviceGetPowerUsage, h)
    limit = _call(n.nvmlDeviceGetEnforcedPowerLimit, h)
    tx = _call(n.nvmlDeviceGetPcieThroughput, h, n.NVML_PCIE_UTIL_TX_BYTES) if pcie else None
    rx = _call(n.nvmlDeviceGetPcieThroughput, h, n.NVML_PCIE_UTIL_RX_BYTES) if pcie else None
    nvlink_tx, nvlink_rx = _nvlink_counters(n, h)
    procs = _call(n.nvmlDeviceGetComputeRunningProcesses, h) or []
    return Readings(
        memory_used=memory.used if memory is not None else None,
        memory_total=memory.total if memory is not None else None,
        util_gpu=util.gpu if util is not None else None,
        util_memory=util.memory if util is not None else None,
        temperature_c=_call(n.nvmlDeviceGetTemperature, h, n.NVML_TEMPERATURE_GPU),
        power_w=power / 1000 if power is not None else None,  # NVML reports milliwatts
        power_limit_w=limit / 1000 if limit is not None else None,
        sm_clock_mhz=_call(n.nvmlDeviceGetClockInfo, h, n.NVML_CLOCK_SM),
        pcie_tx_bps=tx * 1024 if tx is not None else None,  # NVML reports KiB/s
        pcie_rx_bps=rx * 1024 if rx is not None else None,
        nvlink_tx_bytes=nvlink_tx,
        nvlink_rx_bytes=nvlink_rx,
        processes=tuple((p.pid, _process_memory(p)) for p in procs),
        energy_mj=_call(n.nvmlDeviceGetTotalEnergyConsumption, h),
    )


def _memory(n, h):
    # The v2 query counts memory the driver reserves correctly; older drivers lack it.
    version = getattr(n, "nvmlMemory_v2", None)
    if version is not None:
        try:
            return n.nvmlDeviceGetMemoryInfo(h, version=version)
        except n.NVMLError_GpuIsLost as exc:
            raise GpuLost(str(exc)) from None
        except n.NVMLError:
            pass
    return _call(n.nvmlDeviceGetMemoryInfo, h)


def _process_memory(process) -> int | None:
    used = getattr(process, "usedGpuMemory", None)
    # NVML reports "not available" (in containers, without permission) as the all-ones value.
    return None if used is None or used >= (1 << 63) else used


def _nvlink_counters(n, h) -> tuple[int | None, int | None]:
    fields = [n.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, n.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX]
    values = _call(n.nvmlDeviceGetFieldValues, h, fields)
    if values is None:
        return None, None
    out = []
    for value in values:
        # Each field carries its own return code; the counters are in KiB.
        out.append(value.value.ullVal * 1024 if value.nvmlReturn == n.NVML_SUCCESS else None)
    return out[0], out[1]


# ---- topology ------------------------------------------------------------------------

# NVML's common-ancestor levels, as nvidia-smi topo -m labels them.
ANCESTOR_LABELS = {0: "X", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
CPU_SET_WORDS = 16  # 16 x 64 = 1024 CPUs: room for any machine's affinity mask
NODE_SET_WORDS = 1


def common_ancestor(i: int, j: int) -> str | None:
    level = _call(lib().nvmlDeviceGetTopologyCommonAncestor, _handle(i), _handle(j))
    return ANCESTOR_LABELS.get(level) if level is not None else None


@dataclass(frozen=True)
class NvLinks:
    to_gpu: dict[str, int]  # peer PCI bus id -> active links to it
    to_switch: int  # active links to NVSwitches


def nvlinks(index: int) -> NvLinks:
    n, h = lib(), _handle(index)
    to_gpu: dict[str, int] = {}
    to_switch = 0
    for link in range(n.NVML_NVLINK_MAX_LINKS):
        try:
            if n.nvmlDeviceGetNvLinkState(h, link) != n.NVML_FEATURE_ENABLED:
                continue
        except n.NVMLError_GpuIsLost as exc:
            raise GpuLost(str(exc)) from None
        except n.NVMLError:  # no such link, or NVLink not supported at all
            continue
        kind = _call(n.nvmlDeviceGetNvLinkRemoteDeviceType, h, link)
        if kind == n.NVML_NVLINK_DEVICE_TYPE_SWITCH:
            to_switch += 1
        elif kind in (None, n.NVML_NVLINK_DEVICE_TYPE_GPU):
            pci = _call(n.nvmlDeviceGetNvLinkRemotePciInfo, h, link)
            if pci is not None:
                peer = _text(pci.busId)
                to_gpu[peer] = to_gpu.get(peer, 0) + 1
    return NvLinks(to_gpu, to_switch)


@dataclass(frozen=True)
class LinkFacts:
    """What one GPU's links can carry, as NVML says: None for what it cannot tell."""

    nvlink_version: int | None  # NVML's NVLink generation number (4: Hopper), of its first active link
    nvlink_links: int  # active NVLinks, to GPUs or switches
    pcie_gen: int | None  # the most this GPU in this slot can train to
    pcie_width: int | None


def link_facts(index: int) -> LinkFacts:
    n, h = lib(), _handle(index)
    links = nvlinks(index)
    active = links.to_switch + sum(links.to_gpu.values())
    version = None
    for link in range(n.NVML_NVLINK_MAX_LINKS if active else 0):  # the first active link's
        try:
            if n.nvmlDeviceGetNvLinkState(h, link) == n.NVML_FEATURE_ENABLED:
                version = n.nvmlDeviceGetNvLinkVersion(h, link)
                break
        except n.NVMLError_GpuIsLost as exc:
            raise GpuLost(str(exc)) from None
        except n.NVMLError:
            continue
    return LinkFacts(
        version,
        active,
        _call(n.nvmlDeviceGetMaxPcieLinkGeneration, h),
        _call(n.nvmlDeviceGetMaxPcieLinkWidth, h),
    )


def p2p(i: int, j: int) -> dict[str, bool | None]:
    """Peer-to-peer read, write and NVLink support between two GPUs."""
    n = lib()
    out = {}
    for name, index in (
        ("read", n.NVML_P2P_CAPS_INDEX_READ),
        ("write", n.NVML_P2P_CAPS_INDEX_WRITE),
        ("nvlink", n.NVML_P2P_CAPS_INDEX_NVLINK),
    ):
        status = _call(n.nvmlDeviceGetP2PStatus, _handle(i), _handle(j), index)
        out[name] = None if status is None else status == n.NVML_P2P_STATUS_OK
    return out


def _bits(words, word_bits: int = 64) -> list[int]:
    return [w * word_bits + b for w, word in enumerate(words) for b in range(word_bits) if word >> b & 1]


def cpu_affinity(index: int) -> list[int] | None:
    words = _call(lib().nvmlDeviceGetCpuAffinity, _handle(index), CPU_SET_WORDS)
    return _bits(words) if words is not None else None


def numa_affinity(index: int) -> list[int] | None:
    n = lib()
    words = _call(n.nvmlDeviceGetMemoryAffinity, _handle(index), NODE_SET_WORDS, n.NVML_AFFINITY_SCOPE_NODE)
    return _bits(words) if words is not None else None


def gpu_numa_id(index: int) -> int | None:
    fn = getattr(lib(), "nvmlDeviceGetNumaNodeId", None)
    return _call(fn, _handle(index)) if fn is not None else None
