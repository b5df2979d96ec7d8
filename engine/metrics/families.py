"""Every metric, declared once (:data:`METRICS`: its exposed name, type, help and labels; the table
of docs/metrics.md is held to it by a test), and a :class:`~snapshot.Snapshot` turned into
prometheus_client's metric families, for one scrape.

Prometheus' conventions: base units (seconds, bytes, ratios of 0..1, watts, hertz, joules), the unit
last in the name, ``_total`` on counters; the labels ``run`` (the run folder's name), ``node`` and
``rank`` (never ``job``, which Prometheus sets itself), ``gpu`` and ``UUID`` as DCGM's exporter names
its own (so a dashboard joins them); host and device only on the ``_info`` metrics. A figure that is
not known now (no FLOPs counted, a CPU run's GPUs) is left out, never written as 0.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    InfoMetricFamily,
    Metric,
    StateSetMetricFamily,
)

from mgpu_tui import __version__
from mgpu_tui.engine.metrics.snapshot import Gpu, Snapshot, device_word, uuid_word
from mgpu_tui.engine.protocol.causes import CAUSE_KINDS
from mgpu_tui.engine.protocol.events import STEP_PARTS
from mgpu_tui.engine.run.figures.anatomy import KINDS as VERDICT_KINDS
from mgpu_tui.engine.run.figures.rank_state import RankState
from mgpu_tui.engine.run.figures.rank_stats import RankStats
from mgpu_tui.engine.run.watched import RunState

RUN, RANK, GPU = ("run", "node"), ("run", "node", "rank"), ("run", "node", "gpu", "UUID")


@dataclass(frozen=True)
class Declared:
    """One metric as Prometheus sees it: ``name`` as exposed (``_total``, ``_info`` included)."""

    name: str
    type: str  # gauge, counter, stateset, info
    labels: tuple[str, ...]
    help: str

    def family(self) -> Metric:
        unit = next((u for u in _UNITS if self.name.endswith(f"_{u}")), "")
        if self.type == "counter":
            return CounterMetricFamily(self.name.removesuffix("_total"), self.help, labels=self.labels)
        if self.type == "stateset":
            return StateSetMetricFamily(self.name, self.help, labels=self.labels)
        if self.type == "info":
            return InfoMetricFamily(self.name.removesuffix("_info"), self.help, labels=self.labels)
        return GaugeMetricFamily(self.name, self.help, labels=self.labels, unit=unit)


_UNITS = ("seconds", "bytes", "ratio", "watts", "celsius", "hertz")

METRICS = {
    m.name: m
    for m in (
        # ---- the run, as this node's monitor sees it --------------------------------------------
        Declared("mgpu_run_info", "info", RUN, "The run: its node's host, its mode, mgpu-tui's version"),
        Declared(
            "mgpu_run_state",
            "stateset",
            RUN,
            "The run's state: created, running, verifying, ok, failed, interrupted, cut off",
        ),
        Declared("mgpu_run_world_size", "gauge", RUN, "The job's ranks"),
        Declared("mgpu_run_steps_total", "counter", RUN, "The last step every rank reached"),
        Declared(
            "mgpu_run_samples_per_second", "gauge", RUN, "Samples a second over the steady steps, all ranks"
        ),
        Declared(
            "mgpu_run_tokens_per_second", "gauge", RUN, "Tokens a second over the steady steps, where counted"
        ),
        Declared(
            "mgpu_run_step_seconds",
            "gauge",
            (*RUN, "quantile"),
            "The job's step time (its slowest rank's), by quantile over the steady steps: 0.1, 0.5, 0.9",
        ),
        Declared(
            "mgpu_run_loss", "gauge", RUN, "The full global batch's loss at the last step every rank reached"
        ),
        Declared("mgpu_run_flops_per_second", "gauge", RUN, "Every rank's counted FLOPs a second"),
        Declared(
            "mgpu_run_mfu_ratio",
            "gauge",
            RUN,
            "Model FLOPs utilization: the FLOP/s over the GPUs' dense peaks",
        ),
        Declared(
            "mgpu_run_stall_timeout_seconds",
            "gauge",
            RUN,
            "Seconds of silence after which a rank is stalled now",
        ),
        Declared(
            "mgpu_run_verdict",
            "gauge",
            (*RUN, "kind"),
            "1 where the verdict of this kind holds (why the job is slow), else 0",
        ),
        Declared(
            "mgpu_run_verdict_rank",
            "gauge",
            (*RUN, "kind", "rank"),
            "1 for each rank a verdict names, where it names some ranks only",
        ),
        Declared(
            "mgpu_run_root_cause",
            "gauge",
            (*RUN, "kind", "rank"),
            "1 once the run failed: the kind of failure and the rank that failed first",
        ),
        Declared("mgpu_run_malformed_events_total", "counter", RUN, "Event lines skipped as malformed"),
        Declared(
            "mgpu_run_snapshot_timestamp_seconds", "gauge", RUN, "When these figures were taken (Unix time)"
        ),
        # ---- each rank of this node --------------------------------------------------------------
        Declared("mgpu_rank_info", "info", RANK, "A rank: its host, its device, its GPU's UUID"),
        Declared("mgpu_rank_state", "stateset", RANK, "A rank's state, as the Run view says it"),
        Declared("mgpu_rank_steps_total", "counter", RANK, "The rank's last step"),
        Declared(
            "mgpu_rank_samples_per_second", "gauge", RANK, "The rank's samples a second over its steady steps"
        ),
        Declared("mgpu_rank_tokens_per_second", "gauge", RANK, "The rank's tokens a second, where counted"),
        Declared("mgpu_rank_loss", "gauge", RANK, "The rank's loss at its last step"),
        Declared("mgpu_rank_step_seconds", "gauge", RANK, "The rank's mean step time over its steady steps"),
        Declared(
            "mgpu_rank_step_part_seconds",
            "gauge",
            (*RANK, "part"),
            "The rank's mean seconds a step in each part: data, forward, backward, comm, optimizer, host",
        ),
        Declared("mgpu_rank_flops_per_second", "gauge", RANK, "The rank's counted FLOPs a second"),
        Declared("mgpu_rank_mfu_ratio", "gauge", RANK, "The rank's FLOP/s over its GPU's dense peak"),
        Declared(
            "mgpu_rank_memory_bytes",
            "gauge",
            RANK,
            "The rank's memory at its last step (the allocator's on CUDA, RSS on the CPU)",
        ),
        Declared(
            "mgpu_rank_memory_peak_bytes",
            "gauge",
            RANK,
            "The rank's peak memory (the allocator's on CUDA, RSS on the CPU)",
        ),
        Declared("mgpu_rank_tensor_peak_bytes", "gauge", RANK, "The peak of the rank's live tensors"),
        Declared(
            "mgpu_rank_training_state_bytes",
            "gauge",
            RANK,
            "Parameters, gradients and optimizer state, as the rank measured them",
        ),
        Declared(
            "mgpu_rank_planned_training_state_bytes",
            "gauge",
            RANK,
            "The planner's parameters, gradients and optimizer state (a mode's run)",
        ),
        Declared("mgpu_rank_planned_peak_bytes", "gauge", RANK, "The planner's peak (a mode's run)"),
        Declared(
            "mgpu_rank_last_event_timestamp_seconds",
            "gauge",
            RANK,
            "When the rank last wrote an event (Unix time)",
        ),
        Declared(
            "mgpu_rank_straggler_late_seconds",
            "gauge",
            RANK,
            "How late a straggler arrives at the collectives (stragglers only)",
        ),
        Declared(
            "mgpu_rank_collectives_total",
            "counter",
            RANK,
            "Collectives the rank entered, as its flight records say",
        ),
        Declared("mgpu_rank_process_cpu_ratio", "gauge", RANK, "The rank's process CPU use, in cores"),
        Declared(
            "mgpu_rank_process_resident_memory_bytes", "gauge", RANK, "The rank's process resident memory"
        ),
        # ---- each GPU of this node (named to sit beside DCGM's DCGM_FI_DEV_*) -------------------
        Declared("mgpu_gpu_info", "info", GPU, "A GPU: its model (DCGM's modelName)"),
        Declared("mgpu_gpu_lost", "gauge", GPU, "1 once the GPU fell off the bus"),
        Declared("mgpu_gpu_utilization_ratio", "gauge", GPU, "GPU utilization (DCGM_FI_DEV_GPU_UTIL / 100)"),
        Declared(
            "mgpu_gpu_memory_utilization_ratio",
            "gauge",
            GPU,
            "Memory bandwidth utilization (DCGM_FI_DEV_MEM_COPY_UTIL / 100)",
        ),
        Declared("mgpu_gpu_memory_used_bytes", "gauge", GPU, "Memory used (DCGM_FI_DEV_FB_USED, in bytes)"),
        Declared("mgpu_gpu_memory_total_bytes", "gauge", GPU, "Memory in all"),
        Declared("mgpu_gpu_power_watts", "gauge", GPU, "Power draw (DCGM_FI_DEV_POWER_USAGE)"),
        Declared("mgpu_gpu_power_limit_watts", "gauge", GPU, "The enforced power limit"),
        Declared("mgpu_gpu_temperature_celsius", "gauge", GPU, "Temperature (DCGM_FI_DEV_GPU_TEMP)"),
        Declared("mgpu_gpu_sm_clock_hertz", "gauge", GPU, "SM clock (DCGM_FI_DEV_SM_CLOCK, in hertz)"),
        Declared(
            "mgpu_gpu_energy_joules_total",
            "counter",
            GPU,
            "Energy since the driver loaded (DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION, in joules)",
        ),
        Declared("mgpu_gpu_nvlink_transmit_bytes_per_second", "gauge", GPU, "NVLink bytes sent a second"),
        Declared("mgpu_gpu_nvlink_receive_bytes_per_second", "gauge", GPU, "NVLink bytes received a second"),
    )
}

# A rank's states as its own monitor tells them (figures/rank_state.py): "lost" and "missing" are
# what a node's view says of another node's ranks, never a state of a rank served here.
RANK_STATES = tuple(s for s in RankState if s not in (RankState.LOST, RankState.MISSING))

RANK_FIGURES: dict[str, Callable[[RankStats], float | int | None]] = {
    "mgpu_rank_steps_total": lambda r: r.last_step,
    "mgpu_rank_samples_per_second": lambda r: r.samples_per_s,
    "mgpu_rank_tokens_per_second": lambda r: r.tokens_per_s,
    "mgpu_rank_loss": lambda r: r.loss,
    "mgpu_rank_step_seconds": lambda r: r.step_s,
    "mgpu_rank_flops_per_second": lambda r: _flops(r.compute.tflops) if r.compute else None,
    "mgpu_rank_mfu_ratio": lambda r: r.compute.mfu if r.compute else None,
    "mgpu_rank_memory_bytes": lambda r: r.mem_bytes,
    "mgpu_rank_memory_peak_bytes": lambda r: r.mem_peak_bytes,
    "mgpu_rank_tensor_peak_bytes": lambda r: r.tensor_peak_bytes,
    "mgpu_rank_training_state_bytes": lambda r: r.state_bytes,
    "mgpu_rank_last_event_timestamp_seconds": lambda r: r.last_event_t,
    "mgpu_rank_collectives_total": lambda r: r.collectives,
}
GPU_FIGURES: dict[str, Callable[[Gpu], float | None]] = {
    "mgpu_gpu_lost": lambda g: float(g.lost),
    "mgpu_gpu_utilization_ratio": lambda g: g.utilization,
    "mgpu_gpu_memory_utilization_ratio": lambda g: g.memory_utilization,
    "mgpu_gpu_memory_used_bytes": lambda g: g.memory_used_bytes,
    "mgpu_gpu_memory_total_bytes": lambda g: g.memory_total_bytes,
    "mgpu_gpu_power_watts": lambda g: g.power_watts,
    "mgpu_gpu_power_limit_watts": lambda g: g.power_limit_watts,
    "mgpu_gpu_temperature_celsius": lambda g: g.temperature_celsius,
    "mgpu_gpu_sm_clock_hertz": lambda g: g.sm_clock_hertz,
    "mgpu_gpu_energy_joules_total": lambda g: g.energy_joules,
    "mgpu_gpu_nvlink_transmit_bytes_per_second": lambda g: g.nvlink_transmit_bytes_per_second,
    "mgpu_gpu_nvlink_receive_bytes_per_second": lambda g: g.nvlink_receive_bytes_per_second,
}


def _flops(tflops: float | None) -> float | None:
    return None if tflops is None else tflops * 1e12


def families(snap: Snapshot) -> list[Metric]:
    """Every metric of ``snap``, each family whole (one scrape's)."""
    found = {name: declared.family() for name, declared in METRICS.items()}
    _run(snap, found)
    _ranks(snap, found)
    _gpus(snap, found)
    return [family for family in found.values() if family.samples]


def _add(family: Metric, labels: list[str], value: float | int | None) -> None:
    if value is not None:
        family.add_metric(labels, value)  # type: ignore[attr-defined]


def _run(snap: Snapshot, found: dict[str, Metric]) -> None:
    who = [snap.identity.run, str(snap.identity.node)]
    stats, compute = snap.stats, snap.stats.compute
    info = {"host": snap.identity.host, "mode": snap.identity.mode, "version": __version__}
    found["mgpu_run_info"].add_metric(who, info)  # type: ignore[attr-defined]
    states = {state.value: state is snap.state for state in RunState}
    found["mgpu_run_state"].add_metric(who, states)  # type: ignore[attr-defined]
    _add(found["mgpu_run_world_size"], who, snap.world_size)
    _add(found["mgpu_run_steps_total"], who, stats.steps)
    _add(found["mgpu_run_samples_per_second"], who, stats.samples_per_s)
    _add(found["mgpu_run_tokens_per_second"], who, stats.tokens_per_s)
    spread = stats.step_time_s_spread or (None, None)
    for quantile, seconds in (("0.1", spread[0]), ("0.5", stats.step_time_s_median), ("0.9", spread[1])):
        _add(found["mgpu_run_step_seconds"], [*who, quantile], seconds)
    _add(found["mgpu_run_loss"], who, stats.final_loss)
    _add(found["mgpu_run_flops_per_second"], who, _flops(compute.tflops) if compute else None)
    _add(found["mgpu_run_mfu_ratio"], who, compute.mfu if compute else None)
    _add(found["mgpu_run_stall_timeout_seconds"], who, snap.stall_timeout_s)
    held = {v.kind for v in stats.verdicts}
    for kind in VERDICT_KINDS:
        _add(found["mgpu_run_verdict"], [*who, kind], float(kind in held))
    served = set(snap.ranks)
    for verdict in stats.verdicts:
        if verdict.kind in VERDICT_KINDS and len(verdict.ranks) < len(stats.ranks):
            for rank in sorted(set(verdict.ranks) & served):
                _add(found["mgpu_run_verdict_rank"], [*who, verdict.kind, str(rank)], 1.0)
    if snap.root_cause is not None:
        kind, failed = snap.root_cause
        if kind in CAUSE_KINDS:
            _add(found["mgpu_run_root_cause"], [*who, kind, "" if failed is None else str(failed)], 1.0)
    _add(found["mgpu_run_malformed_events_total"], who, snap.malformed_events)
    _add(found["mgpu_run_snapshot_timestamp_seconds"], who, snap.taken_at)


def _ranks(snap: Snapshot, found: dict[str, Metric]) -> None:
    by_rank = {r.rank: r for r in snap.stats.ranks}
    anatomy = {a.rank: a for a in snap.stats.anatomy}
    late = {s.rank: s.late_s for s in snap.stats.stragglers}
    planned = snap.identity.planned or {}
    processes = snap.processes or {}
    figures = [(found[name], figure) for name, figure in RANK_FIGURES.items()]
    for rank, state in zip(snap.ranks, snap.states):
        node = snap.node_of(rank)
        who = [snap.identity.run, str(node), str(rank)]
        r = by_rank.get(rank)
        info = {"host": snap.host_of(node), "device": (device_word(r.device) if r else None) or "unknown"}
        if r is not None and (uuid := uuid_word(r.device_uuid)) is not None:
            info["UUID"] = uuid
        found["mgpu_rank_info"].add_metric(who, info)  # type: ignore[attr-defined]
        states = {s.value: s is state for s in RANK_STATES}
        found["mgpu_rank_state"].add_metric(who, states)  # type: ignore[attr-defined]
        if r is not None:
            for family, figure in figures:
                _add(family, who, figure(r))
        if (parts := anatomy.get(rank)) is not None:
            for part in STEP_PARTS:
                _add(found["mgpu_rank_step_part_seconds"], [*who, part], parts.seconds(part))
        state_bytes, peak_bytes = planned.get(rank, (None, None))
        _add(found["mgpu_rank_planned_training_state_bytes"], who, state_bytes)
        _add(found["mgpu_rank_planned_peak_bytes"], who, peak_bytes)
        _add(found["mgpu_rank_straggler_late_seconds"], who, late.get(rank))
        if (process := processes.get(rank)) is not None:
            _add(found["mgpu_rank_process_cpu_ratio"], who, process.cpu_cores)
            _add(found["mgpu_rank_process_resident_memory_bytes"], who, process.rss_bytes)


def _gpus(snap: Snapshot, found: dict[str, Metric]) -> None:
    figures = [(found[name], figure) for name, figure in GPU_FIGURES.items()]
    for g in snap.gpus:
        who = [snap.identity.run, str(snap.identity.node), str(g.index), g.uuid or ""]
        found["mgpu_gpu_info"].add_metric(who, {"modelName": g.name or "unknown"})  # type: ignore[attr-defined]
        for family, figure in figures:
            _add(family, who, figure(g))


def names() -> Iterator[str]:
    """Every metric's exposed name (docs/metrics.md's table holds the same)."""
    return iter(METRICS)
