"""The result of a run: :class:`RunSummary`, built once when the run ends, written once.

``summary.json`` and the CLI's ``--json`` line are its :meth:`RunSummary.to_json` (a stable
contract; new keys may be added). Each field is described where it is declared, below;
docs/modes.md says the same to users. figures/aggregate.py defines every figure.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass

from mgpu_tui import __version__
from mgpu_tui.engine.launch.processes import ProcessSeen
from mgpu_tui.engine.launch.slurm import SlurmJob
from mgpu_tui.engine.launch.spec import ResolvedSpec
from mgpu_tui.engine.nodes.view import NodeView
from mgpu_tui.engine.protocol.folder import finite_only
from mgpu_tui.engine.protocol.typed import Word, build
from mgpu_tui.engine.run.causes.rootcause import RootCause
from mgpu_tui.engine.run.causes.watchdog import Stall
from mgpu_tui.engine.run.figures.aggregate import RunStats
from mgpu_tui.engine.run.figures.anatomy import RankAnatomy, Verdict
from mgpu_tui.engine.run.figures.mfu import Compute
from mgpu_tui.engine.run.figures.rank_stats import RankStats
from mgpu_tui.engine.run.figures.stragglers import Straggler
from mgpu_tui.engine.run.figures.telemetry_log import TelemetryFigures
from mgpu_tui.engine.run.figures.trainers import Phase, TrainerStats
from mgpu_tui.engine.run.memory.memory_parts import MemoryParts
from mgpu_tui.engine.run.nccl.nccl_record import NcclFigures
from mgpu_tui.engine.run.summary_facts import (
    RankMemory,
    memory_of,
    script_facts,
    summary_note,
)
from mgpu_tui.engine.run.verify import Verify


class RunStatus(Word):
    """How a run ended (``status`` in summary.json: the value)."""

    OK = "ok"
    FAILED = "failed"
    INTERRUPTED = "interrupted"  # stopped on request (the app and the console say "stopped")


@dataclass(frozen=True)
class RankSummary:
    rank: int
    last_step: int
    samples_per_s: float | None
    loss: float | None
    peak_mem_bytes: int | None
    device: str | None
    pid: int | None
    done: bool
    backend: str | None = None  # a script's rank: its default process group's
    tokens_per_s: float | None = None
    collectives: int | None = (
        None  # the collectives it entered (its flight records): a script's progress without steps
    )
    diverged_at: int | None = None  # the first step whose loss was NaN or infinite (its loss is null)
    compute: Compute | None = None  # its TF/s and MFU, where it counted its steps' FLOPs (run/figures/mfu.py)

    @classmethod
    def of(cls, r: RankStats, pid_ok: Callable[[int, int], bool]) -> RankSummary:
        """A rank's line of the summary from its figures; its pid only where ``pid_ok`` (one of the
        run's processes on this host)."""
        return cls(
            rank=r.rank,
            last_step=r.last_step,
            samples_per_s=r.samples_per_s,
            loss=r.loss,
            peak_mem_bytes=r.mem_peak_bytes,
            device=r.device,
            pid=r.pid if r.pid is not None and pid_ok(r.rank, r.pid) else None,
            done=r.done,
            backend=r.backend,
            tokens_per_s=r.tokens_per_s,
            collectives=r.collectives,
            diverged_at=r.diverged_at,
            compute=r.compute,
        )


@dataclass(frozen=True)
class TrainerSummary:
    """A process of a command that trained with no process group (figures/trainers.py), its own."""

    trainer: int  # its number: 1, 2, ... in the order the trainings began
    pid: int | None  # its process, where the run's process tree recorded it
    process: str | None  # the process's name as multiprocessing gives it ("Process-1", "ForkPoolWorker-2")
    phase: int  # the phase of the command it trained in (phases)
    last_step: int
    samples_per_s: float | None
    tokens_per_s: float | None
    loss: float | None
    peak_mem_bytes: int | None
    device: str | None
    done: bool  # it said its training ended on its own
    error: str | None  # the first line of the exception that ended it

    @classmethod
    def of(cls, t: TrainerStats, pid_ok: Callable[[int, int], bool]) -> TrainerSummary:
        r = t.figures
        return cls(
            trainer=t.trainer,
            pid=t.pid if pid_ok(0, t.pid) else None,
            process=t.process,
            phase=t.phase,
            last_step=r.last_step,
            samples_per_s=r.samples_per_s,
            tokens_per_s=r.tokens_per_s,
            loss=r.loss,
            peak_mem_bytes=r.mem_peak_bytes,
            device=r.device,
            done=r.done,
            error=r.error,
        )


@dataclass(frozen=True)
class RunSummary:
    """One run's result, as ``summary.json`` and ``--json`` write it (to_json: a stable contract;
    new keys may be added, each with its default, so older summaries still read). Each field says
    what it holds where it is declared."""

    mode: str  # the mode's name ("script" for --script / --module, "exec" for a command)
    program: str | None  # --script / --module: what ran; None for a mode
    status: RunStatus  # "ok", "failed" or "interrupted"
    exit_code: int | None  # the launcher's
    device: str
    # A script's: what its ranks used (null until known); a mode's: its process group.
    backend: str | None
    shared_gpus: bool  # --share-gpus: ranks shared GPUs (and talked over gloo)
    world_size: int
    nnodes: int
    node_rank: int
    steps: int  # the last step every rank reached
    steps_requested: int | None  # None: a script, which says none
    # The global batch; a script's only where it was counted (where its batches entered DDP or
    # FSDP, else its DataLoader's: batch_size_source says which).
    batch_size: int | None
    samples_per_s: float | None  # global, over the steady steps (aggregate.py defines every figure)
    step_time_s_median: float | None
    step_time_s_p10_p90: tuple[float, float] | None
    final_loss: float | None  # the full global batch's, at the last step
    # By rank: the allocator's peak on CUDA, the peak RSS on the CPU.
    peak_mem_bytes: tuple[int | None, ...]
    # Each rank's figures: rank, last_step, samples_per_s, loss, peak_mem_bytes, device, pid, done,
    # backend, tokens_per_s, collectives, diverged_at, compute (RankSummary).
    ranks: tuple[RankSummary, ...]
    launch_to_first_step_s: float | None
    duration_s: float
    malformed_events: int  # event lines skipped as malformed (a rank can write anything)
    run_dir: str
    # A failure's: rank, exit_code, signal, message, traceback, hint (what it means and what to try,
    # for the known signatures; null otherwise), verdict, host, kind (one of CAUSE_KINDS where its
    # maker knew it, else null: protocol/causes.py's cause_kind tells the rest) and trainer (a
    # trainer's failure: its number; absent otherwise) (causes/rootcause.py).
    root_cause: RootCause | None
    # One sentence on what the figures do not show (a degenerate CPU path, ranks sharing GPUs).
    note: str | None
    # --verify's: ok, max_abs_diff, max_rel_diff, tolerance, precision, compared, missing,
    # unexpected (or ok false and an error) (run/verify.py).
    verify: Verify | None
    # The stall watch's: timeout_s, ranks (rank, last_step, silent_s, process: stopped, running or
    # gone; answers_stacks; trainer_pid, a job of one process's, whose stacks file it names),
    # stacks_dir, verdict (from the flight recorder and the stacks, or a stopped process; null when
    # they cannot tell), culprit and found_at (causes/watchdog.py).
    stall: Stall | None
    telemetry: TelemetryFigures | None = None  # the machine during the run (run/figures/telemetry_log.py)
    # The ranks the others waited for: rank, late_s (how much later than the earliest, on
    # average), steps and of_steps (how often it was the last), data_s and others_data_s (its time
    # on its batch, and the others' median) (figures/stragglers.py).
    stragglers: tuple[Straggler, ...] = ()
    # What NCCL's own log of a CUDA run says: summary (one line), versions, transports,
    # ring_channels, warnings, errors, files (run/nccl/nccl_record.py).
    nccl: NcclFigures | None = None
    # Several nodes: every node of the job as this one last heard it: node, host, ranks, state (ok,
    # failed, interrupted, lost, missing, ...), step, silent_s, here (nodes/view.py); () for one.
    nodes: tuple[NodeView, ...] = ()
    tokens_per_s: float | None = None  # global, where the ranks count tokens (a GPT)
    # Per rank: predicted_state_bytes (parameters, gradients and optimizer state, as
    # planning/memory.py predicts them), measured_state_bytes (what the rank summed over its own
    # tensors after its first optimizer step; null where it cannot: rpc), predicted_total_bytes (its
    # peak: with the activation estimate, buffers and autocast's copies), tensor_peak_bytes (its live
    # tensors' peak: the allocator's on CUDA, torch's MemTracker over the first steps on the CPU)
    # and peak_bytes (allocator on CUDA; the process's resident set on the CPU) (summary_facts.py).
    memory: tuple[RankMemory, ...] = ()
    mgpu_tui_version: str | None = None  # the release that ran it (None: read from an older summary)
    batch_size_source: str | None = None  # a script's: where its batch was counted
    # A script's: every rank of this node ran it to its end (said done), also when one crashed at
    # exit afterwards; null for the modes.
    finished_training: bool | None = None
    # Under Slurm, the job this node ran in: job_id, step_id (null: the batch script),
    # restart_count, nodelist, nnodes, node_id, ntasks, tasks_per_node, procid, localid, partition,
    # cluster, gpus_on_node (launch/slurm.py); null outside Slurm.
    slurm: SlurmJob | None = None
    # An interrupted run that Slurm ended: "cancelled" (scancel) or "time limit"; null otherwise.
    stopped_by: str | None = None
    # A command's (mgpu-tui exec): every process its tree ran, each with the rank it was or belonged to.
    processes: tuple[ProcessSeen, ...] = ()
    # Where the ranks took their steps apart (a script's watch, the demos), per rank: rank, steps
    # (the steady steps it is the mean of), step_s, and data_s, forward_s, backward_s, comm_s,
    # optimizer_s and host_s (its mean seconds a step in each part); absent otherwise (anatomy.py).
    anatomy: tuple[RankAnatomy, ...] = ()
    # Why the job was slow, where that was clear: kind ("input-bound", "straggler",
    # "communication-bound", "compute-bound", "host-bound"), ranks, text (with its number) and hint
    # (the change to try for this kind of job on its device; null where none applies: advice.py);
    # absent when none (anatomy.py).
    verdicts: tuple[Verdict, ...] = ()
    # Where the ranks counted their steps' FLOPs (a script's watch: rank/watch/flops/):
    # tflops (TFLOP/s over the steady steps), mfu (of the GPUs' dense peak for the precision, 0..1),
    # peak_tflops, and note (why the MFU, or both, is null); also per rank in ranks; absent
    # otherwise (run/figures/mfu.py).
    compute: Compute | None = None
    # A command's processes that trained with no process group (Hogwild's, a pool's tasks, a
    # learning-rate finder before the job), each its own: trainer, pid, process, phase, last_step,
    # samples_per_s, tokens_per_s, loss, peak_mem_bytes, device, done, error; absent where none, or
    # where one process trained alone (it is then the job: rank 0 of 1) (run/figures/trainers.py).
    trainers: tuple[TrainerSummary, ...] = ()
    # A command's phases, where it had several (a finder, then the job): phase, kind ("ranks" or
    # "trainers"), world_size (the group's; 0 for trainers), trainers (their numbers), began_at and
    # ended_at (Unix times); absent for one phase (run/figures/trainers.py).
    phases: tuple[Phase, ...] = ()
    # Where each rank's memory goes, where its watch took it apart (run/memory/memory_parts.py):
    # rank, step (whose end the accounting read), parameters, buffers, gradients, optimizer (bytes,
    # each storage counted once), activations (saved for backward on an observed step; null: none
    # observed), peak_bytes, rest (the peak less all those: temporaries, the allocator's reserve, on
    # the CPU the runtime), and creep: kept_graphs, growth_per_step, kept_by; absent otherwise.
    memory_parts: tuple[MemoryParts, ...] = ()

    @property
    def ok(self) -> bool:
        """The run finished, and its verification (if asked for) found it equal to the baseline."""
        return self.status is RunStatus.OK and (self.verify is None or self.verify.ok)

    @classmethod
    def build(
        cls,
        resolved: ResolvedSpec,
        run_dir: str,
        stats: RunStats,
        *,
        status: RunStatus,
        exit_code: int | None,
        root_cause: RootCause | None,
        started_at: float,
        ended_at: float,
        malformed_events: int,
        verify: Verify | None = None,
        stall: Stall | None = None,
        pid_ok: Callable[[int, int], bool] = lambda rank, pid: True,
        telemetry: TelemetryFigures | None = None,
        nccl: NcclFigures | None = None,
        nodes: tuple[NodeView, ...] = (),
        stopped_by: str | None = None,
        world_size: int | None = None,
        processes: tuple[ProcessSeen, ...] = (),
    ) -> RunSummary:
        """``pid_ok(rank, pid)``: whether a rank's pid is one of the run's processes on this host;
        ``world_size``: a command's, as its ranks said (0: none); ``processes``: its tree's."""
        # The job's, never what a rank claims: the spec's, or a command's, learned from its groups.
        world = resolved.world_size if resolved.world_size is not None else world_size or 0
        here = resolved.ranks_here if resolved.world_size is not None else range(world)
        peaks = stats.peak_mem_bytes()
        spec = resolved.spec
        program = spec.program
        facts = script_facts(resolved, stats, world, here) if program else {}
        return cls(
            mode=resolved.mode.name,
            program=program,
            status=status,
            exit_code=exit_code,
            device=facts.get("device", resolved.device),
            backend=facts.get("backend", resolved.process_group),
            shared_gpus=resolved.shared_gpus,
            world_size=world,
            nnodes=spec.nnodes,
            node_rank=spec.node_rank,
            steps=stats.steps,
            steps_requested=facts.get("steps_requested", spec.steps),
            batch_size=facts.get("batch_size", spec.batch_size),
            batch_size_source=facts.get("batch_size_source"),
            finished_training=facts.get("finished_training"),
            samples_per_s=stats.samples_per_s,
            step_time_s_median=stats.step_time_s_median,
            step_time_s_p10_p90=stats.step_time_s_spread,
            final_loss=stats.final_loss,
            peak_mem_bytes=tuple(peaks.get(rank) for rank in range(world)),
            ranks=tuple(RankSummary.of(r, pid_ok) for r in stats.ranks),
            launch_to_first_step_s=(
                stats.first_step_t - started_at if stats.first_step_t is not None else None
            ),
            duration_s=ended_at - started_at,
            malformed_events=malformed_events,
            run_dir=run_dir,
            root_cause=root_cause,
            note=summary_note(resolved, stats, world, processes, ended_at - started_at),
            verify=verify,
            stall=stall,
            telemetry=telemetry,
            stragglers=stats.stragglers,
            nccl=nccl,
            nodes=nodes,
            tokens_per_s=stats.tokens_per_s,
            memory=memory_of(resolved, stats),
            mgpu_tui_version=__version__,
            slurm=spec.slurm,
            stopped_by=stopped_by if status is RunStatus.INTERRUPTED else None,
            processes=processes,
            anatomy=stats.anatomy,
            verdicts=stats.verdicts,
            compute=stats.compute,
            trainers=tuple(TrainerSummary.of(t, pid_ok) for t in stats.trainers),
            phases=stats.phases,
            memory_parts=tuple(r.memory_parts for r in stats.ranks if r.memory_parts is not None),
        )

    def to_json(self) -> dict:
        document = asdict(self)  # nested dataclasses become dicts, tuples stay tuples
        document["step_time_s_p10_p90"] = list(self.step_time_s_p10_p90) if self.step_time_s_p10_p90 else None
        document["peak_mem_bytes"] = list(self.peak_mem_bytes)
        # A rank's diverged_at only where its loss diverged: every other summary reads as before.
        document["ranks"] = [
            {k: v for k, v in asdict(r).items() if k not in ("diverged_at", "compute") or v is not None}
            for r in self.ranks
        ]
        document["root_cause"] = self.root_cause.to_json() if self.root_cause else None
        document["verify"] = self.verify.to_json() if self.verify else None
        document["stall"] = self.stall.to_json() if self.stall else None
        document["telemetry"] = self.telemetry.to_json() if self.telemetry else None
        document["stragglers"] = [asdict(s) for s in self.stragglers]
        document["nodes"] = [n.to_json() for n in self.nodes]
        document["nccl"] = None if self.nccl is None else asdict(self.nccl)
        document["memory"] = [asdict(m) for m in self.memory]
        document["slurm"] = None if self.slurm is None else asdict(self.slurm)
        document["processes"] = [asdict(p) for p in self.processes]
        if not self.processes:  # a command's alone (mgpu-tui exec): every other summary reads as before
            del document["processes"]
        if self.compute is None:  # a job whose ranks counted FLOPs alone: every other reads as before
            del document["compute"]
        for apart in (
            "anatomy",
            "verdicts",
            "trainers",
            "phases",
            "memory_parts",
        ):  # where there are some, alone
            if not document[apart]:
                del document[apart]
        return finite_only(document)  # strict JSON: a diverged (infinite or NaN) figure is null

    @classmethod
    def from_json(cls, document: dict) -> RunSummary:
        """A summary read back (``summary.json``, a ``--json`` line), every field checked against its
        type and bounds (protocol/typed.py); Invalid (a ValueError) naming the field otherwise."""
        return build(cls, document)
