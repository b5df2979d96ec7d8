"""What the machine did during a run, kept with it: ``telemetry.jsonl`` and the summary's figures.

While a run goes, a :class:`TelemetryLog` samples the GPUs, the host and the run's rank
processes (the Sampler of engine/machine/telemetry.py, on its own thread) and appends one JSON
line per sample to ``telemetry.jsonl`` in the run directory::

    {"t": 1795.0, "host": {"cpu": 43.5, "mem_used": 812345344, "mem_total": 25291452416},
     "gpus": [{"i": 0, "uuid": "GPU-...", "mem_used": ..., "mem_total": ..., "util": 97, "power_w": 412.3}],
     "ranks": [{"rank": 0, "pid": 4242, "cpu": 99.0, "rss": 354615296}]}

A field the machine cannot tell is null (no GPU: ``gpus`` is empty). A long run stays bounded:
every sample of the first FULL_RATE_SAMPLES (an hour at 1 s), then one in THIN_EVERY, and the
file never grows past MAX_BYTES (recording then stops, and its last line says so). The figures
for the summary are kept as the samples come, from every sample (thinned or not), so they do not
depend on what the file kept.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TextIO

import psutil

from mgpu_tui.engine.machine.telemetry import RankSource, Sampler, Snapshot
from mgpu_tui.engine.protocol.folder import dumps as strict_json
from mgpu_tui.engine.protocol.typed import build

log = logging.getLogger(__name__)

FULL_RATE_SAMPLES = 3600  # an hour at the default 1 s: every sample kept
THIN_EVERY = 10  # after that, one sample in this many
MAX_BYTES = 32 << 20  # never more than this on disk; at 8 GPUs and 16 ranks a line is ~2.5 KiB


# The machine is busy when what else runs uses at least this many cores, and this share of them.
BUSY_CORES = 0.5
BUSY_SHARE = 0.25


@dataclass
class _Mean:
    total: float = 0.0
    count: int = 0
    peak: float | None = None

    def add(self, value: float | None) -> None:
        if value is None:
            return
        self.total += value
        self.count += 1
        self.peak = value if self.peak is None else max(self.peak, value)

    @property
    def mean(self) -> float | None:
        return self.total / self.count if self.count else None


@dataclass(frozen=True)
class GpuFigures:
    uuid: str
    name: str
    peak_mem_bytes: int | None
    mean_util_percent: float | None
    mean_power_w: float | None
    peak_power_w: float | None
    energy_j: float | None  # from the GPU's energy counter; null where it has none


@dataclass(frozen=True)
class RankFigures:
    rank: int
    peak_rss_bytes: int | None
    mean_cpu_percent: float | None  # of one core


@dataclass(frozen=True)
class TelemetryFigures:
    """What the summary says of the machine during the run (``summary.json``: ``telemetry``)."""

    samples: int
    interval_s: float
    host_mean_cpu_percent: float | None  # all cores together, 0-100
    host_peak_mem_bytes: int | None
    gpus: tuple[GpuFigures, ...] = ()
    ranks: tuple[RankFigures, ...] = ()
    cores: int | None = None  # the host's logical CPUs
    # What everything but the ranks used, in cores, on average (mgpu-tui's own processes included:
    # a few hundredths of a core): another job, a build, a browser on the same machine.
    others_cpu_cores: float | None = None

    @property
    def busy(self) -> str | None:
        """A sentence when the machine was busy with more than the run (its timings are then not to
        be trusted), else None: others used at least half a core and a quarter of the cores."""
        others, cores = self.others_cpu_cores, self.cores
        if others is None or not cores or others < max(BUSY_CORES, BUSY_SHARE * cores):
            return None
        return (
            f"other processes used {others:.1f} of the {cores} cores during the run: its timings "
            "are not to be trusted (run it again on an idle machine)"
        )

    def to_json(self) -> dict:
        return {
            **asdict(self),
            "gpus": [asdict(g) for g in self.gpus],
            "ranks": [asdict(r) for r in self.ranks],
        }

    @classmethod
    def from_json(cls, document: dict) -> TelemetryFigures:
        return build(cls, document)  # every field checked (protocol/typed.py)


@dataclass
class _GpuTrack:
    name: str
    mem: _Mean = field(default_factory=_Mean)
    util: _Mean = field(default_factory=_Mean)
    power: _Mean = field(default_factory=_Mean)
    energy_first: int | None = None
    energy_last: int | None = None


class TelemetryLog:
    """Samples while a run goes and keeps it: :meth:`start`, then :meth:`stop` for the figures."""

    def __init__(
        self,
        path: Path,
        *,
        interval: float,
        ranks: RankSource,
        run_processes: Callable[[], Iterable[tuple[int, float]]] | None = None,
        full_rate_samples: int = FULL_RATE_SAMPLES,
        thin_every: int = THIN_EVERY,
        max_bytes: int = MAX_BYTES,
    ) -> None:
        self.path = path
        self.interval = interval
        self.full_rate_samples, self.thin_every, self.max_bytes = full_rate_samples, thin_every, max_bytes
        self._sampler = Sampler(interval=interval, history=2, ranks=ranks, pcie=False)
        self._lock = threading.Lock()
        self._file: TextIO | None = None
        self._written = 0
        self.samples = 0  # taken
        self.kept = 0  # written to the file
        self._host_cpu, self._host_mem, self._others = _Mean(), _Mean(), _Mean()
        self._cores: int | None = None
        self._gpus: dict[str, _GpuTrack] = {}
        self._ranks: dict[int, tuple[_Mean, _Mean]] = {}  # rank -> (rss, cpu)
        # The run's own processes (its tree: ranks, their data-loader and compile workers, the
        # launcher), whose CPU is not "other": pid -> (create time, CPU seconds at the last sample).
        self._run_processes = run_processes
        self._run_cpu: dict[int, tuple[float, float]] = {}
        self._run_gone: set[tuple[int, float]] = set()
        self._last_t: float | None = None

    def start(self) -> None:
        try:
            self._file = open(self.path, "a", encoding="utf-8")
        except OSError as exc:  # the run goes on without its telemetry, and its log says so
            log.warning("no telemetry for this run: cannot write %s (%s)", self.path, exc.strerror or exc)
            return
        self._sampler.start(on_sample=self._take)

    def stop(self) -> TelemetryFigures:
        """Stop sampling, close the file, and give the run's figures."""
        self._sampler.stop()
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None
            return self._figures()

    def latest(self) -> Snapshot | None:
        """The newest sample, whole (any thread): the GPUs' readings as they are now."""
        return self._sampler.latest()

    # ---- on the sampler's thread ---------------------------------------------------------

    def _take(self, snap: Snapshot) -> None:
        with self._lock:
            self.samples += 1
            self._add(snap)
            if self._file is None:
                return
            past_full_rate = self.samples - self.full_rate_samples
            if past_full_rate > 0 and past_full_rate % self.thin_every:
                return
            line = strict_json(_line(snap), separators=(",", ":")) + "\n"
            if self._written + len(line) > self.max_bytes:
                end = {"t": snap.t, "end": f"recording stopped at {self.max_bytes} bytes"}
                self._file.write(strict_json(end) + "\n")
                self._file.close()
                self._file = None
                return
            try:
                self._file.write(line)
                self._file.flush()
            except OSError as exc:  # a full disk: the run's own watchdog deals with that
                log.warning("telemetry stopped: %s", exc.strerror or exc)
                self._file = None
                return
            self._written += len(line)
            self.kept += 1

    def _add(self, snap: Snapshot) -> None:
        cores = [c for c in snap.host.cpu_percent if c is not None]
        self._host_cpu.add(sum(cores) / len(cores) if cores else None)
        self._cores = len(snap.host.cpu_percent) or self._cores
        ranks = [p.cpu_percent for p in snap.ranks if p.alive]
        whole = bool(cores) and len(cores) == len(snap.host.cpu_percent)
        if self._run_processes is not None:
            ours = self._run_cores(time.time())  # every process of the run, the ranks among them
            if whole and ours is not None:
                self._others.add(max(0.0, sum(cores) / 100 - ours))
        elif whole and ranks and None not in ranks:
            # The host's use of all its cores, less the ranks': what else ran (in cores).
            self._others.add(max(0.0, (sum(cores) - sum(r for r in ranks if r is not None)) / 100))
        self._host_mem.add(snap.host.memory_used)
        for g in snap.gpus:
            track = self._gpus.setdefault(g.uuid, _GpuTrack(g.name))
            r = g.readings
            if r is None:
                continue
            track.mem.add(r.memory_used)
            track.util.add(r.util_gpu)
            track.power.add(r.power_w)
            if r.energy_mj is not None:
                track.energy_first = r.energy_mj if track.energy_first is None else track.energy_first
                track.energy_last = r.energy_mj
        for p in snap.ranks:
            rss, cpu = self._ranks.setdefault(p.rank, (_Mean(), _Mean()))
            if p.alive:
                rss.add(p.rss_bytes)
                cpu.add(p.cpu_percent)

    def _run_cores(self, t: float) -> float | None:
        """The cores the run's own processes used since the last sample, ``t`` being now on the
        wall clock their start times are on (None at the first: CPU use needs two readings). A
        process is known by its pid and start time, so a reused pid is a new process; one started
        since the last sample counts all its CPU."""
        assert self._run_processes is not None
        last_t, self._last_t = self._last_t, t
        seen: dict[int, tuple[float, float]] = {}
        used = 0.0
        for pid, created in [*self._run_processes(), (os.getpid(), 0.0)]:  # (the monitor's own too)
            if (pid, created) in self._run_gone:
                continue  # ended before: a long job's thousands of compiler processes cost no look
            try:
                process = psutil.Process(pid)
                if created and abs(process.create_time() - created) > 0.01:
                    raise psutil.NoSuchProcess(pid)  # its pid, another process's now
                times = process.cpu_times()
            except psutil.Error:
                self._run_gone.add((pid, created))
                continue
            total = times.user + times.system
            before = self._run_cpu.get(pid)
            if before is not None and before[0] == created:
                used += max(0.0, total - before[1])
            elif last_t is not None and created >= last_t:
                used += total
            seen[pid] = (created, total)
        self._run_cpu = seen
        if last_t is None or t <= last_t:
            return None
        return used / (t - last_t)

    def _figures(self) -> TelemetryFigures:
        gpus = tuple(
            GpuFigures(
                uuid,
                t.name,
                _int(t.mem.peak),
                t.util.mean,
                t.power.mean,
                t.power.peak,
                (t.energy_last - t.energy_first) / 1000
                if t.energy_first is not None
                and t.energy_last is not None
                and t.energy_last >= t.energy_first
                else None,
            )
            for uuid, t in self._gpus.items()
        )
        ranks = tuple(
            RankFigures(rank, _int(rss.peak), cpu.mean) for rank, (rss, cpu) in sorted(self._ranks.items())
        )
        return TelemetryFigures(
            self.samples,
            self.interval,
            self._host_cpu.mean,
            _int(self._host_mem.peak),
            gpus,
            ranks,
            cores=self._cores,
            others_cpu_cores=None if self._others.mean is None else round(self._others.mean, 2),
        )


def _int(value: float | None) -> int | None:
    return None if value is None else int(value)


def _line(snap: Snapshot) -> dict:
    cores = [c for c in snap.host.cpu_percent if c is not None]
    return {
        "t": round(snap.t, 3),
        "host": {
            "cpu": round(sum(cores) / len(cores), 1) if cores else None,
            "mem_used": snap.host.memory_used,
            "mem_total": snap.host.memory_total,
        },
        "gpus": [
            {
                "i": g.index,
                "uuid": g.uuid,
                "mem_used": g.readings.memory_used if g.readings else None,
                "mem_total": g.readings.memory_total if g.readings else None,
                "util": g.readings.util_gpu if g.readings else None,
                "power_w": g.readings.power_w if g.readings else None,
                "energy_mj": g.readings.energy_mj if g.readings else None,
            }
            for g in snap.gpus
        ],
        "ranks": [
            {"rank": p.rank, "pid": p.pid, "cpu": p.cpu_percent, "rss": p.rss_bytes}
            for p in snap.ranks
            if p.alive
        ],
    }
