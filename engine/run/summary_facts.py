"""What a run's summary says beyond its figures: its note (what the figures do not show, one
sentence), a script's facts (device, backend, batch, whether it finished, as its ranks said them),
and each rank's memory beside the planner's prediction."""

from __future__ import annotations

from dataclasses import dataclass

from mgpu_tui.engine.launch.processes import ProcessSeen
from mgpu_tui.engine.launch.spec import ResolvedSpec
from mgpu_tui.engine.planning.memory import Training, predicted_per_rank
from mgpu_tui.engine.planning.modes import variant
from mgpu_tui.engine.protocol.text import short_line
from mgpu_tui.engine.run.figures.aggregate import RunStats

SHARED_GPUS_NOTE = (
    "the ranks share GPUs (--share-gpus) and talk over gloo: the results are correct, "
    "but the timings say nothing about a box with a GPU for each rank."
)


def summary_note(
    resolved: ResolvedSpec, stats: RunStats, world: int, processes: tuple[ProcessSeen, ...], duration_s: float
) -> str | None:
    """The summary's note: a command none of whose processes became a rank says what ran; else
    what the run's figures do not show (a script's ranks sharing a device too)."""
    if resolved.world_size is None and not world and not stats.trainers:
        return no_rank_note(processes, duration_s)
    return run_note(resolved) or (shared_device_note(stats) if resolved.spec.program else None)


def run_note(resolved: ResolvedSpec) -> str | None:
    """What this run's figures do not show, in one sentence, or None."""
    if resolved.shared_gpus:
        return SHARED_GPUS_NOTE
    if resolved.device == "cpu" and resolved.mode.cpu_note:
        return f"on the CPU {resolved.mode.cpu_note}"
    return None


def script_facts(resolved: ResolvedSpec, stats: RunStats, world: int, here: range) -> dict:
    """What a script's ranks said they used (its bootstrap's ``about``), for the summary's fields:
    the device and backend (null until a rank said), the global batch and where it was counted."""
    trained = [*stats.ranks, *(t.figures for t in stats.trainers)]
    devices = {r.device.split(":")[0] for r in trained if r.device and r.device != "unknown"}
    backends = {r.backend for r in stats.ranks if r.backend}
    batches = [r.batch for r in stats.ranks]
    counted = bool(batches) and len(batches) == world and None not in batches
    return {
        "device": devices.pop() if len(devices) == 1 else ",".join(sorted(devices)) or "unknown",
        "backend": backends.pop() if len(backends) == 1 else ",".join(sorted(backends)) or None,
        "steps_requested": None,
        "batch_size": sum(batches) if counted else None,
        "batch_size_source": next(r.batch_source for r in stats.ranks) if counted else None,
        # Every rank and every trainer said its training ended on its own.
        "finished_training": bool(stats.ranks or stats.trainers)
        and all(r.done for r in stats.ranks if r.rank in here)
        and all(t.figures.done for t in stats.trainers),
    }


def no_rank_note(processes: tuple[ProcessSeen, ...], duration_s: float) -> str:
    """A command in which no process became a rank, said as what was seen: never "0 steps"."""
    cpu = sum(p.cpu_s or 0.0 for p in processes)
    cores = f"{cpu / duration_s:.1f} cores" if duration_s > 0 else f"{cpu:.1f} CPU seconds"
    busiest = sorted(processes, key=lambda p: -(p.cpu_s or 0.0))[:4]
    seen = "; ".join(f"pid {p.pid} {short_line(p.command, 60)}, {p.cpu_s or 0:.1f} CPU s" for p in busiest)
    return (
        f"no process of this job joined a process group or stepped an optimizer; its "
        f"{len(processes)} process(es) used {cores}" + (f" ({seen})" if seen else "")
    )


def shared_device_note(stats: RunStats) -> str | None:
    """Ranks of one host training on one GPU, which a script does when it never gives each rank its
    own (torch.cuda.set_device): said, since it halves what each gets and NCCL refuses it."""
    by_gpu: dict[tuple[str, str | None], list[int]] = {}
    for r in stats.ranks:
        if r.device and r.device.startswith("cuda"):
            by_gpu.setdefault((r.device, r.device_uuid), []).append(r.rank)
    shared = [(device, ranks) for (device, _), ranks in by_gpu.items() if len(ranks) > 1]
    if not shared:
        return None
    device, ranks = shared[0]
    every = "every rank" if len(ranks) == len(stats.ranks) else "ranks " + ", ".join(map(str, ranks))
    return (
        f"{every} trained on {device}: the script never gives each rank its own GPU; call "
        'torch.cuda.set_device(int(os.environ["LOCAL_RANK"])) before it builds its model.'
    )


@dataclass(frozen=True)
class RankMemory:
    """One rank's memory: the planner's prediction beside what the rank measured."""

    rank: int
    predicted_state_bytes: int | None  # parameters, gradients, optimizer state, at rest
    measured_state_bytes: int | None  # what the rank summed over its tensors after its first step
    predicted_total_bytes: int | None  # the plan's peak (its moment: engine/planning/memory.py)
    tensor_peak_bytes: int | None = None  # its live tensors' peak: the allocator's, or MemTracker's
    peak_bytes: int | None = None  # the allocator's peak on CUDA; the process's resident set on the CPU

    @property
    def state_as_planned(self) -> bool | None:
        """The measured state is the predicted one to the byte (None: nothing to compare)."""
        if self.predicted_state_bytes is None or self.measured_state_bytes is None:
            return None
        return self.predicted_state_bytes == self.measured_state_bytes


def memory_of(resolved: ResolvedSpec, stats: RunStats) -> tuple[RankMemory, ...]:
    """Per rank: the planner's predicted state and total bytes (engine/planning/memory.py) next to the
    state the rank measured after its first step and its peak (allocator on CUDA, RSS on the CPU)."""
    spec = resolved.spec
    if spec.program or resolved.world_size is None:
        return ()  # a user's program: no shape to predict from
    schedule = (
        spec.demo_args[spec.demo_args.index("--schedule") + 1]
        if "--schedule" in spec.demo_args[:-1]
        else "gpipe"
    )
    training = Training(
        optimizer="sgd",
        amp=spec.amp,
        batch_size=spec.batch_size,
        microbatches=spec.microbatches * spec.accum,
        schedule=schedule,
        accum=1 if resolved.mode.microbatched else spec.accum,
    )
    # A variant asked for by its flags (fsdp --no-reshard-after-forward) is planned as that mode.
    mode = variant(resolved.mode, spec.demo_args).name
    predicted = predicted_per_rank(mode, resolved.workload, resolved.world_size, training, stages=spec.stages)
    measured = {r.rank: r for r in stats.ranks}
    rows = []
    for rank in range(resolved.world_size):
        state, total = predicted.get(rank, (None, None))
        r = measured.get(rank)
        rows.append(
            RankMemory(
                rank=rank,
                predicted_state_bytes=state,
                measured_state_bytes=r.state_bytes if r else None,
                predicted_total_bytes=total,
                tensor_peak_bytes=r.tensor_peak_bytes if r else None,
                peak_bytes=r.mem_peak_bytes if r else None,
            )
        )
    return tuple(rows)
