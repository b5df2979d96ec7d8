"""Live telemetry: every GPU (NVML), the host and a run's rank processes (psutil).

A :class:`Sampler` samples on its own thread and hands out frozen
:class:`Snapshot` objects, keeping a bounded history. The next sample is booked
when the previous one has finished, so samples never pile up behind a slow one.
No NVML (no driver, a CPU machine) is a normal state: the snapshot says why and
carries the host and the ranks all the same.

Ranks are tied to GPUs by the CUDA UUID in their hello event, not by pid: pids
differ inside containers, UUIDs do not.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import psutil

from mgpu_tui.engine.machine import nvml

log = logging.getLogger(__name__)

MIN_INTERVAL_S = 0.1
# CPU use is a share of the time since the previous reading, counted in the kernel's 10 ms
# ticks: over a shorter window than this the figure is noise (0% or 100%), so it is None.
MIN_CPU_WINDOW_S = 0.1
# NVML's PCIe rate blocks ~20 ms a call, two calls a GPU: reading all 8 GPUs of a box would
# take a third of a second. Each sample reads PCIe for this many GPUs in turn; the others show
# their last reading (on an 8-GPU box at 1 Hz, at most 8 s old).
PCIE_GPUS_PER_SAMPLE = 1


@dataclass(frozen=True)
class GpuSample:
    index: int
    uuid: str
    name: str
    lost: bool
    readings: nvml.Readings | None  # None when lost or when NVML failed
    nvlink_tx_bps: float | None  # from the cumulative counters: delta / delta t
    nvlink_rx_bps: float | None
    error: str | None = None  # NVML refused to answer (a broken driver): what it said
    pcie_age_s: float | None = None  # how old readings.pcie_*_bps are (read in turn); None: never read


@dataclass(frozen=True)
class HostSample:
    cpu_percent: tuple[float | None, ...]  # per core, since the previous sample; None on the first
    memory_used: int
    memory_total: int
    load_avg: tuple[float, float, float]


@dataclass(frozen=True)
class RankProcess:
    rank: int
    pid: int
    alive: bool
    cpu_percent: float | None  # since the previous sample; None the first time the process is seen
    rss_bytes: int | None
    threads: int | None
    gpu_uuid: str | None  # from its hello event


@dataclass(frozen=True)
class Snapshot:
    t: float
    nvml: nvml.NvmlStatus
    gpus: tuple[GpuSample, ...]
    host: HostSample
    ranks: tuple[RankProcess, ...]


# rank -> (pid, CUDA UUID or None): what a run knows from its hello events.
RankSource = Callable[[], dict[int, tuple[int, str | None]]]


class Sampler:
    def __init__(
        self,
        interval: float = 1.0,
        history: int = 600,
        ranks: RankSource | None = None,
        pcie: bool = True,
    ) -> None:
        if interval < MIN_INTERVAL_S:
            raise ValueError(f"the sampling interval must be at least {MIN_INTERVAL_S} s, got {interval}")
        self.interval = interval
        self.ranks = ranks
        self.pcie = pcie  # False: no PCIe rates, whose NVML call blocks 20 ms (a run's record skips them)
        self._history: collections.deque[Snapshot] = collections.deque(maxlen=history)
        self._nvlink_prev: dict[str, tuple[float, int | None, int | None]] = {}  # uuid -> (monotonic, tx, rx)
        self._pcie_last: dict[int, tuple[float, float | None, float | None]] = {}  # index -> (t, tx, rx)
        self._pcie_next = 0  # the GPU whose PCIe rate the next sample reads first
        self._procs: dict[int, psutil.Process] = {}
        self._identities: dict[int, nvml.GpuIdentity] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.errors = 0  # samples that raised (and were logged); the sampler keeps going
        self._samples = 0
        psutil.cpu_percent(percpu=True)  # the first call only starts the measurement
        self._cpu_since = time.monotonic()

    # ---- the thread ----------------------------------------------------------------

    def start(self, on_sample: Callable[[Snapshot], None] | None = None) -> None:
        """Sample every ``interval`` seconds on a daemon thread; ``on_sample`` gets each snapshot."""

        def loop() -> None:
            while not self._stop.is_set():
                try:
                    snapshot = self.sample()
                except Exception:  # a bad sample must not end telemetry; say why and go on
                    self.errors += 1
                    if self.errors in (1, 10) or self.errors % 100 == 0:  # not once a second for ever
                        log.exception("telemetry sample %d failed (%d so far)", self._samples, self.errors)
                else:
                    if on_sample:
                        on_sample(snapshot)
                # Booked after this sample finished: a slow sample delays the next, never stacks.
                self._stop.wait(self.interval)

        self._thread = threading.Thread(target=loop, name="mgpu-telemetry", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def latest(self) -> Snapshot | None:
        with self._lock:
            return self._history[-1] if self._history else None

    def history(self) -> tuple[Snapshot, ...]:
        with self._lock:
            return tuple(self._history)

    # ---- one sample ------------------------------------------------------------------

    def sample(self) -> Snapshot:
        self._samples += 1
        now = time.time()
        status = nvml.status()
        count = status.device_count if status.ok else 0
        pcie_turn = {
            (self._pcie_next + k) % count for k in range(min(PCIE_GPUS_PER_SAMPLE, count)) if self.pcie
        }
        self._pcie_next = (self._pcie_next + PCIE_GPUS_PER_SAMPLE) % max(count, 1)
        gpus = tuple(self._gpu(i, now, i in pcie_turn) for i in range(count))
        snapshot = Snapshot(now, status, gpus, self._host(), self._ranks())
        with self._lock:
            self._history.append(snapshot)
        return snapshot

    def _gpu(self, index: int, now: float, read_pcie: bool) -> GpuSample:
        ident = self._identities.get(index)
        try:
            if ident is None:
                ident = self._identities[index] = nvml.identity(index)
            r = nvml.readings(index, pcie=read_pcie)
            # The NVLink counters' moment: readings() reads them last but for microseconds of calls,
            # where the sample began before every earlier GPU's readings and this one's 40 ms of
            # PCIe calls, which vary from sample to sample (a rate over the sample's start was off
            # by that much: 20% at a 0.3 s interval under load).
            counted_at = time.monotonic()
        except nvml.GpuLost:
            uuid = ident.uuid if ident else f"index {index}"
            return GpuSample(index, uuid, ident.name if ident else "unknown", True, None, None, None)
        except nvml.NvmlCallFailed as exc:
            uuid = ident.uuid if ident else f"index {index}"
            name = ident.name if ident else "unknown"
            return GpuSample(index, uuid, name, False, None, None, None, error=str(exc))
        prev = self._nvlink_prev.get(ident.uuid)
        self._nvlink_prev[ident.uuid] = (counted_at, r.nvlink_tx_bytes, r.nvlink_rx_bytes)
        tx_rate = rx_rate = None
        if prev is not None and counted_at > prev[0]:
            dt = counted_at - prev[0]
            if r.nvlink_tx_bytes is not None and prev[1] is not None:
                tx_rate = max(0, r.nvlink_tx_bytes - prev[1]) / dt
            if r.nvlink_rx_bytes is not None and prev[2] is not None:
                rx_rate = max(0, r.nvlink_rx_bytes - prev[2]) / dt
        if read_pcie:
            self._pcie_last[index] = (now, r.pcie_tx_bps, r.pcie_rx_bps)
        pcie_age = None
        if index in self._pcie_last:
            read_at, tx, rx = self._pcie_last[index]
            r, pcie_age = dataclasses.replace(r, pcie_tx_bps=tx, pcie_rx_bps=rx), now - read_at
        return GpuSample(index, ident.uuid, ident.name, False, r, tx_rate, rx_rate, pcie_age_s=pcie_age)

    def _host(self) -> HostSample:
        memory = psutil.virtual_memory()
        cpu, now = tuple(psutil.cpu_percent(percpu=True)), time.monotonic()
        window, self._cpu_since = now - self._cpu_since, now
        return HostSample(
            cpu_percent=cpu if window >= MIN_CPU_WINDOW_S else (None,) * len(cpu),
            memory_used=memory.total - memory.available,
            memory_total=memory.total,
            load_avg=os.getloadavg(),
        )

    def _ranks(self) -> tuple[RankProcess, ...]:
        if self.ranks is None:
            return ()
        out = []
        wanted = self.ranks()
        for rank, (pid, uuid) in sorted(wanted.items()):
            known = self._procs.get(pid)
            try:
                first = known is None
                proc = known if known is not None else self._procs.setdefault(pid, psutil.Process(pid))
                with proc.oneshot():
                    alive = proc.status() != psutil.STATUS_ZOMBIE
                    cpu = proc.cpu_percent(None)  # the first call starts the measurement: no figure yet
                    out.append(
                        RankProcess(
                            rank,
                            pid,
                            alive,
                            None if first else cpu,
                            proc.memory_info().rss,
                            proc.num_threads(),
                            uuid,
                        )
                    )
            except psutil.Error:
                out.append(RankProcess(rank, pid, False, None, None, None, uuid))
        for pid in set(self._procs) - {pid for pid, _ in wanted.values()}:
            del self._procs[pid]
        return tuple(out)
