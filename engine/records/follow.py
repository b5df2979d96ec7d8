"""A run read from its folder alone: a finished one replayed, a live one followed (``mgpu-tui open``).

:class:`FollowedRun` offers the reading side of run/lifecycle.py's ``Run`` (poll, stats, series,
log lines, the summary) from the files only, so the app shows either the same way. It never owns
the run: closing it leaves the run going. It can only *ask* the process that follows the run to
stop it (run/monitor.py), and only when that process is an mgpu-tui of this user.

Its states: ``running`` while a process follows the run (its lock is held); then ``ok``, ``failed``
or ``interrupted`` from ``summary.json``; or ``cut off`` when nobody follows the run and it has no
summary (its monitor was killed, the machine restarted): its ranks died with their monitor
(the keeper's parent-death signal), so it will never have one.

Every file is read as the untrusted thing it is: bounded, parsed defensively, the events through
the same Ingest as a live run (which checks each event against the job's shape).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from mgpu_tui.engine.launch.slurm import expand_hostlist
from mgpu_tui.engine.launch.spec import LaunchSpec, as_device
from mgpu_tui.engine.machine.slurm import cancel_job, job_state
from mgpu_tui.engine.nodes.view import NodeView
from mgpu_tui.engine.planning.modes import EXEC, MODES, Job
from mgpu_tui.engine.protocol.file_tail import FileTail
from mgpu_tui.engine.protocol.folder import loads, read_json
from mgpu_tui.engine.protocol.heartbeat import MAX_HOST, NodeState, plain
from mgpu_tui.engine.protocol.rundir import RunDir
from mgpu_tui.engine.records.history import (
    MAX_SPEC_BYTES,
    MAX_SUMMARY_BYTES,
    RecordedSpec,
    RecordError,
    RecordStatus,
    read_run,
    read_spec,
)
from mgpu_tui.engine.records.telemetry_read import MAX_TELEMETRY_LINE, NodeMachine, TelemetrySeries
from mgpu_tui.engine.run.causes.watchdog import Stall, stall_timeout
from mgpu_tui.engine.run.ingest import Ingest, IngestReadings
from mgpu_tui.engine.run.monitor import Monitor, MonitorRecord, is_followed, monitor_of
from mgpu_tui.engine.run.summary import RunSummary
from mgpu_tui.engine.run.watched import RunState

READS_PER_POLL = 64  # a finished run's files are read in chunks; this many a poll keeps it brisk


FollowState = RunState  # its first name, kept: a followed run's states are any run's (run/watched.py)


def job_of_spec(spec: RecordedSpec) -> Job | None:
    """What the recorded run's ranks communicate: its mode's (a script's is learned from its ranks);
    None for a mode this catalogue does not know."""
    if spec.program is not None:
        return EXEC.job
    mode = MODES.get(spec.mode or "")
    return mode.job if mode is not None else None


class FollowedRun(IngestReadings):
    """One run directory, read as it is and as it grows (stats, series, log lines: IngestReadings)."""

    def __init__(self, path: Path) -> None:
        record = read_run(path)
        if record.status is RecordStatus.BROKEN:
            raise RecordError(f"{path} cannot be opened: {record.reason}.")
        spec, machine, node = read_spec(path)
        # A script says no total: its steps are counted, not requested.
        self.steps_requested: int | None = None if spec.program else (spec.steps or 0)
        self.requested_stall_timeout = spec.stall_timeout
        restarts = spec.max_restarts > 0
        self.path = path
        self.recorded_spec = spec
        self.machine = machine  # the host it ran on, as its spec.json says (the ranks' to write)
        self.run_dir = RunDir(path, node=node)
        self.what = record.what
        world = spec.world_size if spec.world_size is not None else record.world_size
        ranks = "its own ranks" if world is None else f"{world} rank{'s' if world != 1 else ''}"
        self.label = f"{record.label} on {ranks}"
        self.summary: RunSummary | None = None
        self.stopped_rank: int | None = None  # (only the run's own monitor stops a rank of it)
        self.state = RunState.RUNNING
        self.telemetry = TelemetrySeries()
        self.nnodes = spec.nnodes
        self._ingest = Ingest(
            self.run_dir,
            spec.world_size,  # None: a command's, learned from its ranks' events as a live run does
            restarts=restarts,
            log_dirs=self._log_dirs,
            command_output=bool(spec.command),
            job=job_of_spec(spec),
        )
        self._telemetry_tail = FileTail(self.run_dir.telemetry_path, max_line=MAX_TELEMETRY_LINE)
        self._hosts: dict[int, str] = {}  # several nodes sharing the folder: each node's host, once read
        self._written: set[int] = set()  # several nodes: those whose spec is in the folder, as last listed
        self._node_tails: dict[int, FileTail] = {}  # several nodes: each node's telemetry file
        self._machines: dict[int, NodeMachine] = {}
        self.live_at_open = self.followed()

    @property
    def world_size(self) -> int:
        """The job's ranks: its spec's, or a command's as its ranks said (0 before any did)."""
        return self._ingest.world_size or 0

    def launch_spec(self) -> tuple[LaunchSpec, int] | None:
        """(the spec to run it again, its ranks) for a run of a built-in mode or of a script of one
        node; None otherwise. A script's comes with its own arguments, bare or not, and its stall
        settings, as it ran."""
        spec = self.recorded_spec
        program = spec.program is not None
        try:
            again = LaunchSpec(
                mode="exec" if spec.command else "script" if program else str(spec.mode),
                command=spec.command,
                steps=spec.steps or 0,
                batch_size=spec.batch_size or 0,
                amp=spec.amp,
                device=as_device(spec.device_requested or spec.device),
                share_gpus=spec.share_gpus,
                model=spec.model or "mlp",  # an older record has no --model: the MLP
                model_args=spec.model_args,
                script=spec.script,
                module=spec.module,
                demo_args=spec.demo_args,
                instrument=spec.instrument,
                stall_timeout=spec.stall_timeout,
                on_stall=spec.on_stall,
            )
        except (TypeError, ValueError):
            return None
        if not program and again.mode not in MODES:  # (as_device refused a device that is not one)
            return None
        if program and spec.nnodes > 1:
            return None  # a job of several nodes starts on each of them, not from here
        return again, spec.nproc or self.world_size or 1

    def _log_dirs(self) -> list[tuple[RunDir, int]]:
        """Every node's logs in the folder the nodes share, each with its first global rank; one
        node's run has its own logs only."""
        if self.nnodes < 2 or self.world_size % self.nnodes:
            return [(self.run_dir, 0)]
        per_node = self.world_size // self.nnodes
        return [(RunDir(self.path, node=n), n * per_node) for n in sorted(self._written) if n < self.nnodes]

    def followed(self) -> bool:
        """Whether a process follows the run now (and so it may still change)."""
        return is_followed(self.run_dir.monitor_lock_path)

    def monitor(self) -> Monitor | None:
        """The process that follows the run, as the kernel names it; None when nobody does."""
        return monitor_of(self.run_dir.monitor_lock_path)

    # ---- the same reading interface as a Run ---------------------------------------------

    def poll(self) -> RunState:
        """Read what the files gained; notice the summary, or that nobody follows the run any more."""
        if self.state.finished:
            return self.state
        # Looked at before reading, so that what a monitor wrote before it let go is read below.
        alive = self.followed()
        if self.nnodes > 1:  # one listing a poll, for the logs, the telemetry and the nodes it reads
            self._written = self.run_dir.node_specs()
        for _ in range(READS_PER_POLL):
            if not self._ingest.read():
                break
        self._read_telemetry()
        self._read_node_telemetry()
        summary_path = self.run_dir.summary_path
        if summary_path.exists():
            try:
                document = read_json(summary_path, MAX_SUMMARY_BYTES, root=self.path)
                self.summary = RunSummary.from_json(document)
            except (OSError, ValueError):
                self.summary = None  # half-written: read again at the next poll
            if self.summary is not None:
                self.state = RunState(self.summary.status)
        elif not alive:
            self.state = RunState.CUT_OFF
        if self.state.finished:  # whatever came last, within a bound (the ends of files past it)
            self._ingest.catch_up()
            self._read_telemetry()
        return self.state

    def _read_telemetry(self) -> None:
        for _ in range(READS_PER_POLL):
            for raw in self._telemetry_tail.read_lines():
                try:
                    line = loads(raw)
                except ValueError:
                    continue
                if isinstance(line, dict):
                    self.telemetry.add(line)
            if not self._telemetry_tail.behind:
                return

    def _read_node_telemetry(self) -> None:
        """Several nodes: each node's latest host figures, from its own telemetry file."""
        if self.nnodes < 2:
            return
        for node in sorted(self._written):
            if node >= self.nnodes:
                continue
            tail = self._node_tails.get(node)
            if tail is None:
                path = RunDir(self.path, node=node).telemetry_path
                tail = self._node_tails[node] = FileTail(path, max_line=MAX_TELEMETRY_LINE)
            for _ in range(READS_PER_POLL):
                for raw in tail.read_lines():
                    try:
                        line = loads(raw)
                    except ValueError:
                        continue
                    if isinstance(line, dict) and isinstance(line.get("host"), dict):
                        self._machines[node] = NodeMachine.of(line)
                if not tail.behind:
                    break

    def node_machines(self) -> dict[int, NodeMachine]:
        """Several nodes: each node's host as its telemetry last said (the CPU, memory, GPUs)."""
        return dict(self._machines)

    def rank_processes(self) -> dict[int, tuple[int, str | None]]:
        """Nothing: another process owns this run's ranks, and pids read from its files are not ours
        to trust (the Dashboard samples the ranks of the app's own runs only)."""
        return {}

    def stop_rank(self, rank: int) -> str:
        """Nothing: a rank of a run another process follows is never signalled from here."""
        return f"rank {rank} belongs to a run another process follows: only that run's monitor stops it."

    def stalled_ranks(self) -> frozenset[int] | None:
        """As Run.stalled_ranks: a script's run, followed, has no stall found until its summary says;
        its quiet ranks are silent (the monitor that runs it is the judge)."""
        spec = self.recorded_spec
        script = bool(spec.program) and spec.instrument
        return frozenset() if script else None

    def stall_timeout(self) -> float:
        return stall_timeout(self.requested_stall_timeout, self._ingest.recent_step_time())

    @property
    def stall(self) -> Stall | None:
        """The stall its summary holds, once it has one (the verdict of a hang that was stopped)."""
        return self.summary.stall if self.summary is not None else None

    def nodes(self) -> tuple[NodeView, ...]:
        """Several nodes: each node of the job, from the summary once there is one, else from the
        folder the nodes share (each node's spec names its host; the events hold every rank's steps)."""
        if self.nnodes < 2 or self.world_size % self.nnodes:
            return ()
        if self.summary is not None and self.summary.nodes:
            # Checked as the summary was read; none is "here": the app only looks at the folder.
            return tuple(dataclasses.replace(n, here=False) for n in self.summary.nodes)
        per_node = self.world_size // self.nnodes
        steps = {r.rank: r.last_step for r in self.stats().ranks}
        rows = []
        written = self._written  # poll's one listing, not a look-up a node (a spec may claim thousands)
        for node in range(self.nnodes):
            if node not in self._hosts and node in written:
                try:
                    spec_file = RunDir(self.path, node).spec_path
                    document = read_json(spec_file, MAX_SPEC_BYTES, root=self.path)
                    self._hosts[node] = plain(str(document["machine"]["hostname"]), MAX_HOST)
                except (OSError, ValueError, KeyError, TypeError):
                    pass  # not there (yet): that node has not started, or keeps its own folder
            first = node * per_node
            known = tuple((rank, steps[rank]) for rank in range(first, first + per_node) if rank in steps)
            step = min(s for _, s in known) if len(known) == per_node else None
            state = NodeState.RUNNING if node in self._hosts else NodeState.JOINING
            rows.append(
                NodeView(
                    node, self._hosts.get(node), first, first + per_node - 1, state, step, None, False, known
                )
            )
        return tuple(rows)

    def stop(self, confirmed: Monitor | None = None) -> None:
        """Ask the run's monitor to stop it (SIGTERM, as Ctrl-C in its terminal): PermissionError with
        a sentence when it may not be asked, ProcessLookupError when it is gone. With ``confirmed``
        (the monitor the user said yes about), only that very process is asked."""
        monitor = self.monitor()
        if monitor is None:
            raise ProcessLookupError("nobody follows this run any more; it has ended.")
        if confirmed is not None and not monitor.same_process(confirmed):
            raise PermissionError(
                f"this run's monitor is no longer the process you were asked about (pid {confirmed.pid}), "
                "so nothing was sent."
            )
        monitor.ask_to_stop()

    def why_not_cancellable(self) -> str | None:
        """None when the Slurm job this run's folder names may be cancelled, else one sentence why
        not. The folder is the ranks' to write: the job is believed only as the run's own monitor,
        holding its lock, recorded it (monitor.json), and that record only as far as it can be
        checked. A monitor on this machine's kernel is asked directly: the process holding the lock
        is the one recorded, and its own environment is of that job. A monitor on another host
        (its lock held over a shared filesystem) is checked with Slurm: the job runs on the host
        the record names."""
        job = self.recorded_spec.slurm
        if job is None:
            return "this run is no Slurm job's."
        if not self.followed():
            return "nothing follows this run any more: it has ended."
        unknown = f"so Slurm job {job.job_id} was not cancelled"
        monitor = self.monitor()
        if monitor is not None:
            record = monitor.record
            if record is None or (record.pid, record.start) != (monitor.pid, monitor.start):
                return (
                    f"the process holding this run's lock (pid {monitor.pid}) is not the monitor it "
                    f"recorded, {unknown}."
                )
            if not monitor.holds_this_lock:
                return (
                    f"the process holding this run's lock (pid {monitor.pid}) follows another run, {unknown}."
                )
            if monitor.slurm_job != job.job_id:
                runs_in = f"Slurm job {monitor.slurm_job}" if monitor.slurm_job else "no Slurm job"
                return f"this run's monitor (pid {monitor.pid}) runs in {runs_in}, {unknown}."
            return None
        record = MonitorRecord.read(self.run_dir.monitor_lock_path)
        if record is None or record.slurm_job != job.job_id:
            return f"this run's monitor did not record that it runs in Slurm job {job.job_id}, {unknown}."
        state = job_state(job.job_id)
        if state is None or state.nodelist is None:
            return f"Slurm did not say where job {job.job_id} runs, so it was not cancelled."
        if record.host not in expand_hostlist(state.nodelist):
            return (
                f"Slurm runs job {job.job_id} on {state.nodelist}, not on {record.host} where this "
                "run's monitor is, so it was not cancelled."
            )
        return None

    def cancel_slurm_job(self) -> str | None:
        """``scancel`` the Slurm job this run is (every node then stops, saying "cancelled"), once
        :meth:`why_not_cancellable` allows it; None once Slurm took it, else the sentence why not."""
        if reason := self.why_not_cancellable():
            return reason
        job = self.recorded_spec.slurm
        assert job is not None  # (why_not_cancellable said so)
        return cancel_job(job.job_id)

    def close(self) -> None:
        """Let go of the files; the run itself goes on."""
        self._ingest.close()
        self._telemetry_tail.close()
        for tail in self._node_tails.values():
            tail.close()
