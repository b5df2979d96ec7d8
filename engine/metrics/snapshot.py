"""What the metrics say of a run at one moment: a frozen :class:`Snapshot`, taken by the thread that
polls the run (the one that owns it) and read whole by any scrape (families.py turns it into metric
families). Taking one is the only moment the run is touched; a scrape reads only the snapshot.

Every label value here is the engine's own word or a fixed kind, never text a rank wrote: the run's
folder name, this node's rank and host, a mode of the catalogue, a device as ``cpu`` or ``cuda:N``,
a GPU's UUID in NVML's form (anything else a rank claims is "other", or left out).
"""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from mgpu_tui.engine.machine.telemetry import Snapshot as MachineSample
from mgpu_tui.engine.planning.modes import MODES
from mgpu_tui.engine.protocol.causes import cause_kind
from mgpu_tui.engine.records.follow import FollowedRun
from mgpu_tui.engine.records.telemetry_read import TelemetrySeries
from mgpu_tui.engine.run.figures.aggregate import Aggregator, RunStats
from mgpu_tui.engine.run.figures.rank_state import RankState, rank_state, with_stragglers
from mgpu_tui.engine.run.lifecycle import Run
from mgpu_tui.engine.run.summary_facts import memory_of
from mgpu_tui.engine.run.watched import RunState

MAX_LABEL = 128
_WORD = re.compile(r"[^A-Za-z0-9._:@+-]")
_DEVICE = re.compile(r"(cpu|cuda|mps|xpu|hpu|npu|meta)(:[0-9]{1,4})?")
_UUID = re.compile(r"(GPU|MIG)-[0-9A-Za-z/-]{8,80}")


def label_word(text: object, default: str = "unknown") -> str:
    """A label value of the engine's own text (a host, a folder's name): letters, digits and
    ``._:@+-`` only (anything else as ``_``), at most MAX_LABEL characters."""
    word = _WORD.sub("_", str(text))[:MAX_LABEL] if text is not None else ""
    return word or default


def device_word(device: str | None) -> str | None:
    """A rank's device as a label: ``cpu``, ``cuda:1``...; "other" for anything else a rank wrote."""
    if device is None:
        return None
    return device if _DEVICE.fullmatch(device) else "other"


def uuid_word(uuid: str | None) -> str | None:
    """A GPU's UUID as NVML writes it (GPU-..., MIG-...); None for anything else."""
    return uuid if uuid is not None and _UUID.fullmatch(uuid) else None


@dataclass(frozen=True)
class Identity:
    """Who the metrics are of: the labels every series carries, fixed for the run's life."""

    run: str  # the run folder's name
    node: int  # this node's rank in the job (0 for one node)
    host: str
    mode: str  # a mode of the catalogue, "script", "exec" or "other"
    nnodes: int = 1
    # rank -> its planned (state, peak) bytes (engine/planning/memory.py), for a mode's run
    planned: Mapping[int, tuple[int | None, int | None]] | None = None


def identify(run: Run | FollowedRun) -> Identity:
    """A run this process started (its host is this machine), or one followed from its folder (its
    host as its spec says, its mode as the catalogue knows it)."""
    if isinstance(run, Run):
        spec, resolved = run.resolved.spec, run.resolved
        planned = {
            m.rank: (m.predicted_state_bytes, m.predicted_total_bytes)
            for m in memory_of(resolved, Aggregator().stats())
        }
        return Identity(
            label_word(run.run_dir.path.name),
            spec.node_rank,
            label_word(socket.gethostname()),
            resolved.mode.name,
            spec.nnodes,
            MappingProxyType(planned) if planned else None,
        )
    recorded = run.recorded_spec
    known = MODES.get(str(recorded.mode))
    mode = known.name if known else "exec" if recorded.command else "script" if recorded.program else "other"
    host = run.machine.hostname if run.machine is not None else None
    return Identity(label_word(run.path.name), run.run_dir.node or 0, label_word(host), mode, recorded.nnodes)


@dataclass(frozen=True)
class Gpu:
    """One GPU's readings now, in base units (None: not known here)."""

    index: int
    uuid: str | None
    name: str | None
    lost: bool = False
    utilization: float | None = None  # 0..1
    memory_utilization: float | None = None
    memory_used_bytes: float | None = None
    memory_total_bytes: float | None = None
    power_watts: float | None = None
    power_limit_watts: float | None = None
    temperature_celsius: float | None = None
    sm_clock_hertz: float | None = None
    energy_joules: float | None = None  # the counter since the driver loaded
    nvlink_transmit_bytes_per_second: float | None = None
    nvlink_receive_bytes_per_second: float | None = None


@dataclass(frozen=True)
class Process:
    """A rank's process as the run's telemetry sampled it."""

    cpu_cores: float | None
    rss_bytes: int | None


@dataclass(frozen=True)
class Snapshot:
    identity: Identity
    taken_at: float
    state: RunState
    stats: RunStats
    ranks: tuple[int, ...]  # the ranks this monitor serves, in order
    states: tuple[RankState, ...]  # each of ``ranks``'
    stall_timeout_s: float
    world_size: int | None
    root_cause: tuple[str, int | None] | None  # (its kind, its rank) once the run failed
    gpus: tuple[Gpu, ...] = ()
    processes: Mapping[int, Process] | None = None  # rank -> its process, where sampled
    malformed_events: int = 0
    per_node: int | None = None  # a followed job of several nodes: its ranks a node (node = rank // it)
    hosts: Mapping[int, str] | None = None  # a followed job of several nodes: node -> its host

    def node_of(self, rank: int) -> int:
        """The node a rank runs on: this one, or in a followed job of several nodes, its own."""
        return rank // self.per_node if self.per_node else self.identity.node

    def host_of(self, node: int) -> str:
        return (self.hosts or {}).get(node, self.identity.host)


def take(run: Run | FollowedRun, identity: Identity, stats: RunStats | None = None) -> Snapshot:
    """The run as it is now, on the thread that owns it (``stats``: its figures, just read)."""
    now = time.time()
    stats = run.stats() if stats is None else stats
    state = RunState(run.state)
    summary = run.summary
    cause = summary.root_cause if summary is not None else None
    finished = state.finished
    ranks = _ranks(run, stats)
    by_rank = {r.rank: r for r in stats.ranks}
    slow = {s.rank for s in stats.stragglers}
    stall_after, stalled = run.stall_timeout(), run.stalled_ranks()
    failed = cause.rank if cause is not None else None
    ok = state is RunState.OK
    states = tuple(
        with_stragglers(
            rank_state(
                by_rank.get(rank), now, stall_after, failed, finished, ok, number=rank, stalled=stalled
            ),
            rank,
            slow,
        )
        for rank in ranks
    )
    machine = run.machine_now() if isinstance(run, Run) else None
    per_node, hosts = _nodes(run, identity)
    return Snapshot(
        identity=identity,
        taken_at=now,
        state=state,
        stats=stats,
        ranks=ranks,
        states=states,
        stall_timeout_s=stall_after,
        world_size=run.world_size or None,
        root_cause=(cause_kind(cause), cause.rank) if cause is not None else None,
        gpus=_live_gpus(machine) if machine is not None else _recorded_gpus(run),
        processes=MappingProxyType(_processes(machine)) if machine is not None else None,
        malformed_events=run.malformed_events,
        per_node=per_node,
        hosts=hosts,
    )


def _ranks(run: Run | FollowedRun, stats: RunStats) -> tuple[int, ...]:
    """The ranks this monitor serves: a live run's on this node (those not heard from yet too); a
    followed run's, every rank of the job."""
    if isinstance(run, Run):
        return tuple(run.ranks_here())
    heard = {r.rank for r in stats.ranks}
    return tuple(sorted(heard | set(range(run.world_size or 0))))


def _nodes(run: Run | FollowedRun, identity: Identity) -> tuple[int | None, Mapping[int, str] | None]:
    """A followed job of several nodes: its ranks a node, and each node's host as its spec says."""
    world = run.world_size or 0
    if isinstance(run, Run) or identity.nnodes < 2 or not world or world % identity.nnodes:
        return None, None
    hosts = {n.node: label_word(n.host) for n in run.nodes() if n.host is not None}
    return world // identity.nnodes, MappingProxyType(hosts)


def _live_gpus(machine: MachineSample) -> tuple[Gpu, ...]:
    gpus = []
    for g in machine.gpus:
        r = g.readings
        if r is None:
            gpus.append(Gpu(g.index, uuid_word(g.uuid), label_word(g.name), lost=g.lost))
            continue
        gpus.append(
            Gpu(
                g.index,
                uuid_word(g.uuid),
                label_word(g.name),
                lost=g.lost,
                utilization=_ratio(r.util_gpu),
                memory_utilization=_ratio(r.util_memory),
                memory_used_bytes=r.memory_used,
                memory_total_bytes=r.memory_total,
                power_watts=r.power_w,
                power_limit_watts=r.power_limit_w,
                temperature_celsius=r.temperature_c,
                sm_clock_hertz=None if r.sm_clock_mhz is None else r.sm_clock_mhz * 1e6,
                energy_joules=None if r.energy_mj is None else r.energy_mj / 1000,
                nvlink_transmit_bytes_per_second=g.nvlink_tx_bps,
                nvlink_receive_bytes_per_second=g.nvlink_rx_bps,
            )
        )
    return tuple(gpus)


def _recorded_gpus(run: Run | FollowedRun) -> tuple[Gpu, ...]:
    """A followed run's GPUs, from its telemetry file's latest line (records/telemetry_read.py:
    each figure already checked): memory, utilization and power, by index."""
    telemetry: TelemetrySeries | None = run.telemetry if isinstance(run, FollowedRun) else None
    if telemetry is None or not telemetry.t:
        return ()
    gpus = []
    for index, track in sorted(telemetry.gpus.items()):
        gpus.append(
            Gpu(
                index,
                None,
                None,
                utilization=_ratio(track["util"][-1]),
                memory_used_bytes=track["mem"][-1],
                memory_total_bytes=telemetry.gpu_mem_total.get(index),
                power_watts=track["power"][-1],
            )
        )
    return tuple(gpus)


def _processes(machine: MachineSample) -> dict[int, Process]:
    return {
        p.rank: Process(None if p.cpu_percent is None else p.cpu_percent / 100, p.rss_bytes)
        for p in machine.ranks
        if p.alive
    }


def _ratio(percent: float | None) -> float | None:
    return None if percent is None else percent / 100
