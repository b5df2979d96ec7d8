"""A stand-in for the ``pynvml`` module, for machines with no NVIDIA GPU (this one, CI).

It behaves like the real binding where the engine can tell: the same constants,
the same exception classes (raised through ``pynvml.NVMLError(code)``, as the
real one does), real ctypes structs for field values, NotSupported on fields a
GPU lacks, NVLink counters that only grow, and GPUs that can be lost. Machines
are described by their facts (links, PCIe ancestors, affinity), taken from the
published ``nvidia-smi topo -m`` outputs in tests/fixtures/topology.
"""

from __future__ import annotations

import time
import types
import zlib
from dataclasses import dataclass, field

import pynvml as real

LEVEL = {"X": 0, "PIX": 10, "PXB": 20, "PHB": 30, "NODE": 40, "SYS": 50}


def _error(code):
    return real.NVMLError(code)  # returns the matching subclass, as the real library raises


@dataclass
class FakeGpu:
    name: str
    uuid: str
    bus_id: str
    memory_total: int
    cpus: list[int]
    numa_node: int
    switch_links: int = 0
    gpu_links: dict[int, int] = field(default_factory=dict)  # peer index -> links
    unsupported: set[str] = field(default_factory=set)  # function names that raise NotSupported
    lost: bool = False
    memory_used: int = 0
    util: int = 0
    nvlink_rate: int = 0  # bytes/s added to each NVLink counter
    nvlink_version: int = 4  # NVML's number for the NVLink generation (4: H100)
    pcie_gen: int = 5  # the most this GPU and its slot can train to
    pcie_width: int = 16
    processes: list[tuple[int, int]] = field(default_factory=list)


@dataclass
class FakeMachine:
    gpus: list[FakeGpu]
    ancestors: dict[tuple[int, int], str]  # PCIe label for pairs without NVLink
    init_error: int | None = None  # e.g. real.NVML_ERROR_LIBRARY_NOT_FOUND
    # NVML measures a PCIe rate over a window and blocks for it: 20.6 ms a call on an H100
    # (driver 580.159.04, docs/gpu-validation.md), where other queries take microseconds.
    pcie_window_s: float = 0.02


class _Memory:
    def __init__(self, total, used):
        self.total, self.used, self.free = total, used, total - used


class _Util:
    def __init__(self, gpu, memory):
        self.gpu, self.memory = gpu, memory


class _Pci:
    def __init__(self, bus_id):
        self.busId = bus_id


class _Process:
    def __init__(self, pid, used):
        self.pid, self.usedGpuMemory = pid, used


def standin(machine: FakeMachine) -> types.ModuleType:
    """A module object with pynvml's interface, answering for ``machine``."""
    module = types.ModuleType("pynvml_standin")
    # Constants and exception classes are the real ones.
    for name in dir(real):
        if name.startswith(("NVML_", "NVMLError", "nvmlMemory_v", "c_nvml")):
            setattr(module, name, getattr(real, name))
    module.NVMLError = real.NVMLError
    started = time.monotonic()
    state = {"init": False}

    def gpu(handle) -> FakeGpu:
        if not state["init"]:
            raise _error(real.NVML_ERROR_UNINITIALIZED)
        g = machine.gpus[handle]
        if g.lost:
            raise _error(real.NVML_ERROR_GPU_IS_LOST)
        return g

    def query(name):
        def decorator(fn):
            def wrapper(handle, *args, **kwargs):
                g = gpu(handle)
                if name in g.unsupported:
                    raise _error(real.NVML_ERROR_NOT_SUPPORTED)
                return fn(g, handle, *args, **kwargs)

            setattr(module, name, wrapper)
            return wrapper

        return decorator

    def nvmlInit():
        if machine.init_error is not None:
            raise _error(machine.init_error)
        state["init"] = True

    module.nvmlInit = nvmlInit
    module.nvmlShutdown = lambda: state.update(init=False)
    module.nvmlDeviceGetCount = lambda: len(machine.gpus) if state["init"] else _raise_uninit()
    module.nvmlSystemGetDriverVersion = lambda: "550.54.15"

    def nvmlDeviceGetHandleByIndex(index):
        if not 0 <= index < len(machine.gpus):
            raise _error(real.NVML_ERROR_INVALID_ARGUMENT)
        gpu(index)
        return index

    module.nvmlDeviceGetHandleByIndex = nvmlDeviceGetHandleByIndex

    @query("nvmlDeviceGetUUID")
    def _(g, h):
        return g.uuid

    @query("nvmlDeviceGetName")
    def _(g, h):
        return g.name

    @query("nvmlDeviceGetPciInfo")
    def _(g, h):
        return _Pci(g.bus_id)

    @query("nvmlDeviceGetMemoryInfo")
    def _(g, h, version=None):
        return _Memory(g.memory_total, g.memory_used)

    @query("nvmlDeviceGetUtilizationRates")
    def _(g, h):
        return _Util(g.util, g.util // 2)

    @query("nvmlDeviceGetTemperature")
    def _(g, h, sensor):
        return 40 + g.util // 4

    @query("nvmlDeviceGetPowerUsage")
    def _(g, h):
        return 70_000 + 5_000 * g.util  # milliwatts

    @query("nvmlDeviceGetTotalEnergyConsumption")
    def _(g, h):
        # As the driver counts it: millijoules since it loaded, the power drawn integrated.
        return int((time.monotonic() - started) * (70_000 + 5_000 * g.util))

    @query("nvmlDeviceGetEnforcedPowerLimit")
    def _(g, h):
        return 700_000

    @query("nvmlDeviceGetClockInfo")
    def _(g, h, clock):
        return 1980

    @query("nvmlDeviceGetPcieThroughput")
    def _(g, h, counter):
        time.sleep(machine.pcie_window_s)
        return 1000 + g.util * 100  # KiB/s

    @query("nvmlDeviceGetComputeRunningProcesses")
    def _(g, h):
        return [_Process(pid, used) for pid, used in g.processes]

    @query("nvmlDeviceGetFieldValues")
    def _(g, h, field_ids):
        values = (real.c_nvmlFieldValue_t * len(field_ids))()
        elapsed = time.monotonic() - started
        for i, field_id in enumerate(field_ids):
            values[i].fieldId = field_id
            if g.switch_links or g.gpu_links:
                values[i].nvmlReturn = real.NVML_SUCCESS
                values[i].valueType = real.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
                values[i].value.ullVal = int(g.nvlink_rate * elapsed) // 1024  # cumulative KiB
            else:
                values[i].nvmlReturn = real.NVML_ERROR_NOT_SUPPORTED
        return values

    def links(g: FakeGpu) -> list[tuple[str, int | None]]:
        out = [("switch", None)] * g.switch_links
        for peer, count in sorted(g.gpu_links.items()):
            out += [("gpu", peer)] * count
        return out

    @query("nvmlDeviceGetNvLinkState")
    def _(g, h, link):
        if link >= len(links(g)):
            raise _error(real.NVML_ERROR_NOT_SUPPORTED if not links(g) else real.NVML_ERROR_INVALID_ARGUMENT)
        return real.NVML_FEATURE_ENABLED

    @query("nvmlDeviceGetNvLinkVersion")
    def _(g, h, link):
        if link >= len(links(g)):
            raise _error(real.NVML_ERROR_NOT_SUPPORTED if not links(g) else real.NVML_ERROR_INVALID_ARGUMENT)
        return g.nvlink_version

    @query("nvmlDeviceGetMaxPcieLinkGeneration")
    def _(g, h):
        return g.pcie_gen

    @query("nvmlDeviceGetMaxPcieLinkWidth")
    def _(g, h):
        return g.pcie_width

    @query("nvmlDeviceGetNvLinkRemoteDeviceType")
    def _(g, h, link):
        kind, _ = links(g)[link]
        return real.NVML_NVLINK_DEVICE_TYPE_SWITCH if kind == "switch" else real.NVML_NVLINK_DEVICE_TYPE_GPU

    @query("nvmlDeviceGetNvLinkRemotePciInfo")
    def _(g, h, link):
        kind, peer = links(g)[link]
        return _Pci("FFFFFFFF:FF:00.0" if kind == "switch" else machine.gpus[peer].bus_id)

    @query("nvmlDeviceGetTopologyCommonAncestor")
    def _(g, h, other):
        gpu(other)
        return LEVEL[machine.ancestors[(min(h, other), max(h, other))]]

    @query("nvmlDeviceGetP2PStatus")
    def _(g, h, other, index):
        gpu(other)
        if index == real.NVML_P2P_CAPS_INDEX_NVLINK:
            linked = g.switch_links and machine.gpus[other].switch_links or other in g.gpu_links
            return real.NVML_P2P_STATUS_OK if linked else real.NVML_P2P_STATUS_NOT_SUPPORTED
        return (
            real.NVML_P2P_STATUS_OK
            if LEVEL.get(machine.ancestors.get((min(h, other), max(h, other)), "SYS")) <= 20 or g.switch_links
            else real.NVML_P2P_STATUS_CHIPSET_NOT_SUPPORED
        )

    @query("nvmlDeviceGetCpuAffinity")
    def _(g, h, words):
        mask = [0] * words
        for cpu in g.cpus:
            mask[cpu // 64] |= 1 << (cpu % 64)
        return mask

    @query("nvmlDeviceGetMemoryAffinity")
    def _(g, h, words, scope):
        mask = [0] * words
        mask[g.numa_node // 64] |= 1 << (g.numa_node % 64)
        return mask

    @query("nvmlDeviceGetNumaNodeId")
    def _(g, h):
        raise _error(real.NVML_ERROR_NOT_SUPPORTED)  # as on the fixture machines ("GPU NUMA ID: N/A")

    return module


def _raise_uninit():
    raise _error(real.NVML_ERROR_UNINITIALIZED)


# ---- the fixture machines -------------------------------------------------------------------


def _cpus(spec: str) -> list[int]:
    out = []
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        out += list(range(int(lo), int(hi or lo) + 1))
    return out


def machine_from_topology(topology, name: str, memory_gib: int, *, nvlink_rate: int = 0) -> FakeMachine:
    """Facts of a machine whose `nvidia-smi topo -m` we have: NV<k> to all -> k switch links each."""
    n = len(topology.gpus)
    gpus, ancestors = [], {}
    switched = topology.nvswitch
    for g in topology.gpus:
        peers = {
            j: int(topology.matrix[g.index][j][2:])
            for j in range(n)
            if j != g.index and topology.matrix[g.index][j].startswith("NV")
        }
        gpus.append(
            FakeGpu(
                name=name,
                uuid=f"GPU-{g.index:08x}-0000-0000-0000-{zlib.crc32(name.encode()):012d}",
                bus_id=f"00000000:{0x10 + 0x10 * g.index:02X}:00.0",
                memory_total=memory_gib << 30,
                cpus=_cpus(g.cpu_affinity),
                numa_node=int(g.numa_affinity),
                switch_links=max(peers.values()) if switched and peers else 0,
                gpu_links={} if switched else peers,
                nvlink_rate=nvlink_rate,
            )
        )
    for i in range(n):
        for j in range(i + 1, n):
            label = topology.matrix[i][j]
            ancestors[(i, j)] = label if label in LEVEL else "SYS"
    return FakeMachine(gpus, ancestors)


def nvlink_pairs_machine() -> FakeMachine:
    """4 GPUs in two NVLink pairs (0-1 and 2-3, NV4 each), the pairs on different sockets."""
    gpus = [
        FakeGpu(
            name="NVIDIA A100-PCIE-40GB",
            uuid=f"GPU-pair{i}",
            bus_id=f"00000000:{0x20 + i:02X}:00.0",
            memory_total=40 << 30,
            cpus=_cpus("0-15") if i < 2 else _cpus("16-31"),
            numa_node=0 if i < 2 else 1,
            gpu_links={i ^ 1: 4},
            nvlink_rate=10 << 30,
        )
        for i in range(4)
    ]
    ancestors = {(0, 1): "PIX", (2, 3): "PIX", (0, 2): "SYS", (0, 3): "SYS", (1, 2): "SYS", (1, 3): "SYS"}
    return FakeMachine(gpus, ancestors)


def nvml_failing_every_call() -> types.ModuleType:
    """pynvml as a broken driver presents it: init works, then every call raises NVMLError (Unknown)."""
    fake = types.ModuleType("pynvml")
    for name in dir(real):
        if name.startswith(("NVMLError", "NVML_")):
            setattr(fake, name, getattr(real, name))

    def fail(*args, **kwargs):
        raise real.NVMLError(real.NVML_ERROR_UNKNOWN)

    for name in dir(real):
        if name.startswith("nvml"):
            setattr(fake, name, fail)
    fake.nvmlInit = lambda: None
    fake.nvmlShutdown = lambda: None
    fake.nvmlDeviceGetCount = lambda: 2
    fake.nvmlSystemGetDriverVersion = lambda: "550.54.15"
    return fake
