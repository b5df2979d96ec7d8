"""One run of a mode: start it, follow it, stop it, verify it, and leave nothing behind.

:class:`Run` ties the parts together; each part is its own module:

``processes.py`` (the launcher and every process it begets, and how they end), ``ingest.py`` (the
ranks' files, followed as they grow), ``watchdog.py`` (what ends a run early: a stall, a full disk,
a failed rank's peers that outlive torchrun's patience), ``rootcause.py`` (which rank failed first,
and why), ``verify.py`` (``--verify``), ``summary.py`` (the :class:`RunSummary`, built once at the end).

States: created -> running -> (verifying ->) ok | failed | interrupted. Stopping: SIGTERM
to the job's process group (torchrun passes it on), the stop grace, then SIGKILL to every
process of the run. Only one thread may call :meth:`Run.poll`, :meth:`Run.stop` and
:meth:`Run.close`; the reading methods (stats, series, log lines, rank processes) are
safe from any thread.
"""

from __future__ import annotations

import os
import signal
import sys
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from mgpu_tui.engine.launch.command import Launch, build_command
from mgpu_tui.engine.launch.job_output import Foreground, JobOutput
from mgpu_tui.engine.launch.processes import STOP_GRACE_S, ProcessTree
from mgpu_tui.engine.launch.spec import LaunchSpec, ResolvedSpec
from mgpu_tui.engine.machine import host as host_module
from mgpu_tui.engine.machine.telemetry import Snapshot as MachineSample
from mgpu_tui.engine.nodes.view import NodeView
from mgpu_tui.engine.nodes.watch import NodeWatch
from mgpu_tui.engine.protocol.heartbeat import NodeState
from mgpu_tui.engine.protocol.rundir import RunDir
from mgpu_tui.engine.run import ending, starting
from mgpu_tui.engine.run.causes.out_of_memory import oom_kills
from mgpu_tui.engine.run.causes.rootcause import RootCause
from mgpu_tui.engine.run.causes.watchdog import Stall, StalledRank, Watchdog
from mgpu_tui.engine.run.figures.telemetry_log import TelemetryLog
from mgpu_tui.engine.run.ingest import Ingest, IngestReadings
from mgpu_tui.engine.run.monitor import MonitorLock
from mgpu_tui.engine.run.runlog import RunLog
from mgpu_tui.engine.run.summary import RunSummary
from mgpu_tui.engine.run.verify import Verification
from mgpu_tui.engine.run.watched import RunState

# Once every rank has said hello, the process tree is rescanned this rarely: each
# scan reads all of /proc, and on a machine whose cores the ranks fill, every
# wake-up of the monitor delays a rank (and so the whole synchronous job).
TREE_RESCAN_S = 5.0
FR_READ_S = 5.0  # the ranks' flight-recorder dumps (who arrives late) are read this often
NODE_LOST_GRACE_S = 1.0  # another node is gone or failed: SIGTERM, this long, then SIGKILL


class Run(IngestReadings):
    """A run of one resolved spec in one run directory (stats, series and log lines: IngestReadings)."""

    def __init__(
        self,
        resolved: ResolvedSpec,
        run_dir: RunDir,
        *,
        python: str = sys.executable,
        environ: Mapping[str, str] | None = None,
        cpu_count: int | None = None,
        foreground: Foreground | None = None,
    ) -> None:
        """``foreground``: a launch line the user wrote, run as a shell runs it (starting.py)."""
        self.resolved = resolved
        self.run_dir = run_dir
        self.run_id = uuid.uuid4().hex
        self.python = python
        self.log = RunLog(self.run_id, run_dir.run_log)
        # Several nodes: this node's watch over the others, through the rendezvous store.
        multi_node = resolved.spec.nnodes > 1
        self._nodes = NodeWatch(resolved, run_dir, python=python, log=self.log) if multi_node else None
        self.foreground = foreground
        self.launch: Launch = build_command(
            resolved,
            run_dir,
            self.run_id,
            python=python,
            cpu_count=cpu_count or host_module.cpu_count(),
            base_env=os.environ if environ is None else environ,
            local_addr=self._nodes.local_addr if self._nodes is not None else None,
            buffered_as_bare=foreground is not None,
        )
        self.stop_grace = resolved.spec.stop_grace if resolved.spec.stop_grace is not None else STOP_GRACE_S
        self.output: JobOutput | None = None  # a command's own stdout and stderr (starting.py)
        self.state = RunState.CREATED
        self.summary: RunSummary | None = None  # once the run has finished
        self._command = resolved.mode.launcher == "command"  # mgpu-tui exec: its ranks are learned
        self._tree = ProcessTree(
            self.launch,
            self.run_id,
            resolved.spec.nice,
            # A command's ranks are all of this node (one node): any rank a process of the tree says.
            ranks_here=resolved.ranks_here if not self._command else range(1 << 20),
            launcher_is_rank=not resolved.mode.multi_process,
            note_processes=self._command,
            log=self.log,
        )
        # A command's ranks are processes of its tree: no claim of a world size is shown past them.
        seen = (lambda: len(self._tree.known())) if self._command else None
        self._ingest = Ingest(
            run_dir,
            resolved.world_size,
            restarts=resolved.spec.max_restarts > 0,
            command_output=self._command,
            job=resolved.mode.job,
            seen=seen,
        )
        self._verification: Verification | None = None
        self._telemetry: TelemetryLog | None = None
        # Held while this process follows the run: `mgpu-tui open` and `runs` tell a live run by it.
        self._monitor = MonitorLock(run_dir.monitor_lock_path)
        self._exit_code: int | None = None
        self._fr_read_at = self._started_at = 0.0
        self.oom_kills_before = oom_kills()  # its cgroup's OOM kills so far (ending.py: a rank's SIGKILL)
        self._stop_requested = False
        self.stopped_rank: int | None = None  # the rank the user stopped on its own (the app's x)
        self._stopped_by: str | None = None  # Slurm's word for who stopped it (stop())
        self._node_cause: RootCause | None = None  # what ended the run from another node, or its absence
        self._watchdog = Watchdog(
            resolved,
            run_dir,
            self._ingest,
            self._tree,
            log=self.log,
            stop=self.stop,
            local_ranks=self._local_pids,
            ranks_here=self.ranks_here,
        )

    @classmethod
    def prepare(
        cls, spec: LaunchSpec, host: host_module.Host | None = None, *, name: str | None = None, **kwargs
    ) -> Run:
        """Resolve the spec, create its run directory and write ``spec.json`` (starting.py)."""
        return starting.prepare(cls, spec, host, name=name, **kwargs)

    # ---- lifecycle ---------------------------------------------------------------------

    def start(self) -> None:
        if self.state is not RunState.CREATED:
            raise RuntimeError("this run was already started")
        if not self._monitor.hold():  # the run still goes; only others cannot tell it is live
            self.log.warning(
                "cannot lock %s: `mgpu-tui open` will see this run as cut off", self.run_dir.monitor_lock_path
            )
        self._started_at = time.time()
        if self._nodes is not None:
            # Several nodes: the ranks start once this node hosts or has joined the store (poll()).
            try:
                self._nodes.start()
            except BaseException:
                self._let_go()
                self.log.close()
                raise
        else:
            starting.start_launcher(self)
        self._telemetry = starting.start_telemetry(self, self._tree.known)
        self.state = RunState.RUNNING

    def _let_go(self) -> None:
        """The launcher could not start: nothing of the run may stay (the node link), nor its lock."""
        if self._nodes is not None:
            self._nodes.close()
        self._monitor.release()

    @property
    def launched(self) -> bool:
        """Whether the launcher has started (several nodes: once the store is hosted or joined)."""
        return self._tree.proc is not None

    def poll(self) -> RunState:
        """Read what is new, and notice the end of the run. Never blocks for long."""
        if self.state is RunState.VERIFYING and self._verification is not None:
            verify = self._verification.poll()
            if verify is not None:
                ending.finish(self, verify)
            return self.state
        if self.state is not RunState.RUNNING:
            return self.state
        if self._nodes is not None and not self._poll_nodes(self._nodes):
            return self.state
        self._ingest.read()
        if self.resolved.spec.nnodes == 1 and time.monotonic() - self._fr_read_at >= FR_READ_S:
            self._fr_read_at = time.monotonic()
            self._ingest.read_flight_records(self.ranks_here())
        if not self._stop_requested:
            self._watchdog.check()  # may stop the run: a stall, a full disk
            if self.state.finished:
                return self.state
        # Until every rank of this node has said hello with a pid the tree holds, rescan at each
        # poll (a rank's pid is believed only once the scan has seen it); then every few seconds.
        # A command's ranks appear whenever its processes join a group: until they have, once a second.
        all_ranks_known = len(self.ranks_here()) > 0 and len(self.rank_processes()) >= len(self.ranks_here())
        since = time.monotonic() - self._tree.scanned_at
        if since >= TREE_RESCAN_S or (not all_ranks_known and (since >= 1.0 or not self._command)):
            self._tree.record_descendants()
        returncode = self._tree.returncode()
        if returncode is not None:
            ending.launcher_ended(self, returncode)
        return self.state

    def wait(
        self,
        timeout: float | None = None,
        *,
        interval: float = 0.5,
        on_poll: Callable[[Run], None] | None = None,
    ) -> RunState:
        """Poll until the run ends (or ``timeout`` passes); ``on_poll`` is called after each poll."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.poll().finished:
            if on_poll:
                on_poll(self)
            if deadline is not None and time.monotonic() >= deadline:
                break
            if self.state is RunState.VERIFYING or not self.launched:
                time.sleep(min(interval, 0.2))
            else:
                self._tree.sleep_unless_exit(interval)
        if on_poll and self.state.finished:
            on_poll(self)
        return self.state

    def stop(self, grace: float | None = None, *, stopped_by: str | None = None) -> RunState:
        """SIGTERM to the job's group, ``grace`` s (the run's stop grace), SIGKILL. ``stopped_by``: who
        asked, where not the user (Slurm's "cancelled" or "time limit"): the summary says it."""
        grace = self.stop_grace if grace is None else grace
        self._stopped_by = self._stopped_by or stopped_by
        if self.state is RunState.VERIFYING and self._verification is not None:
            self._stop_requested = True
            self._verification.stop()
            ending.finish(self, None)
        if self.state is not RunState.RUNNING:
            return self.state
        self._stop_requested = True
        if not self.launched:  # several nodes, still joining: only the link to end
            ending.finish(self, None)
            return self.state
        self.log.info("stopping every process of the run (SIGTERM, then SIGKILL after %.0f s)", grace)
        self._tree.terminate(grace)
        return self.poll()

    def pass_signal(self, sig: signal.Signals, *, stopped_by: str | None = None) -> None:
        """A signal mgpu-tui received, passed to the job's process group (not again where the group
        has just had it: a Ctrl-C), SIGKILL after the stop grace; the run ends interrupted."""
        if self.state is not RunState.RUNNING or not self.launched:
            self.stop(stopped_by=stopped_by)
            return
        self._stopped_by = self._stopped_by or stopped_by
        self._stop_requested = True
        self.log.info("passed %s to the job (SIGKILL after %.0f s)", sig.name, self.stop_grace)
        self._tree.pass_signal(sig, self.stop_grace)

    def kill_now(self) -> None:
        """SIGKILL to every process of the run now (a second Ctrl-C)."""
        self._stop_requested = True
        self.log.info("killing every process of the run, as asked")
        self._tree.kill_now()

    def close(self) -> None:
        """Make sure nothing of this run is alive, whatever state it is in."""
        if self.state in (RunState.RUNNING, RunState.VERIFYING):
            self.stop(grace=0)
        elif self.state is RunState.CREATED:  # never started: nothing runs, only the log to close
            self.log.close()
        if self.output is not None:
            self.output.close()

    def __enter__(self) -> Run:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def result(self) -> RunSummary:
        """The summary of a run that has ended (a run is only read back once its end is seen)."""
        if self.summary is None:
            raise RuntimeError(f"the run in {self.run_dir.path} has not ended ({self.state.value})")
        return self.summary

    # ---- reading (any thread) ------------------------------------------------------------

    @property
    def world_size(self) -> int | None:
        """The job's ranks: the spec's, or for a command the ranks' own word, once one said (None
        before: a command in which no process has become a rank yet)."""
        return self.resolved.world_size if not self._command else self._ingest.world_size

    def ranks_here(self) -> range:
        """The global ranks this node runs: the spec's, or a command's, once learned."""
        if not self._command:
            return self.resolved.ranks_here
        return range(self._ingest.world_size or 0)

    def rank_processes(self) -> dict[int, tuple[int, str | None]]:
        """Rank -> (pid, CUDA UUID) for this node's ranks whose hello named a process of this
        run: a telemetry Sampler's ``ranks`` source. Any other pid a rank wrote is not believed
        (on several nodes, another node's pid numbers mean nothing here)."""
        return {
            rank: (pid, uuid)
            for rank, (pid, uuid) in self._ingest.rank_processes().items()
            if self._tree.is_rank_here(rank, pid)
        }

    def stop_rank(self, rank: int) -> str:
        """SIGTERM to one rank's process, as if it died on its own (torchrun then ends the others,
        and the root cause names it): only a process of this run's tree that said it is that rank.
        One sentence of what was done, or why nothing was."""
        pid = self._local_pids().get(rank)
        if pid is None:
            return f"rank {rank} is no process of this run on this machine that can be stopped."
        if not self._tree.signal([pid], signal.SIGTERM):
            return f"rank {rank} (pid {pid}) has already ended."
        self.stopped_rank = rank
        self.log.info("sent SIGTERM to rank %d (pid %d), asked in the app", rank, pid)
        return f"Sent SIGTERM to rank {rank} (pid {pid}): the launcher sees it end, and stops the others."

    def _local_pids(self) -> dict[int, int]:
        return {rank: pid for rank, (pid, _) in self.rank_processes().items()}

    @property
    def stall(self) -> Stall | None:
        """The stall, once some rank stopped reporting."""
        return self._watchdog.stall

    @property
    def silent(self) -> tuple[StalledRank, ...]:
        """Ranks silent past the stall timeout whose silence is not (yet) a stall: shown, not acted on."""
        return () if self._watchdog.stall is not None else self._watchdog.silent

    def stalled_ranks(self) -> frozenset[int] | None:
        """The ranks of the stall found, where silence needs evidence to be one (a user's script);
        None where silence is a stall (a mode's run): the app's rank table reads it."""
        if not self.resolved.stall_evidence:
            return None
        return frozenset(r.rank for r in self.stall.ranks) if self.stall is not None else frozenset()

    def stall_timeout(self) -> float:
        """Seconds of silence after which a rank counts as stalled now (watchdog.py's rule)."""
        return self._watchdog.stall_timeout()

    def nodes(self) -> tuple[NodeView, ...]:
        """Several nodes: every node of the job as this one hears them; () for one node."""
        return self._nodes.view() if self._nodes is not None else ()

    def node_machines(self) -> dict[int, Any]:
        """Nothing: the run's own node is the Dashboard's; the others' hosts are read from the
        shared folder by whoever follows the job (records/follow.py: NodeMachine)."""
        return {}

    def machine_now(self) -> MachineSample | None:
        """The run's latest telemetry sample (its GPUs, the host, its ranks); None without one."""
        return self._telemetry.latest() if self._telemetry is not None else None

    def node_role(self) -> str | None:
        """Several nodes: this node's part in the rendezvous, in words; None for one node."""
        return self._nodes.role() if self._nodes is not None else None

    # ---- inside -----------------------------------------------------------------------

    def _steps_here(self) -> dict[int, int]:
        """This node's ranks' last steps (where nodes share a folder, the ingest reads them all)."""
        here = self.ranks_here()
        return {r.rank: r.last_step for r in self._ingest.stats().ranks if r.rank in here}

    def _poll_nodes(self, nodes: NodeWatch) -> bool:
        """Several nodes: start the launcher once the store is there, publish this node's steps, and
        end the run when another node is lost or failed. False: nothing more to poll now."""
        nodes.poll()
        if not self.launched:
            self._node_cause = nodes.failure_to_start()
            if self._node_cause is not None:
                self.log.error("%s", self._node_cause.message)
                ending.finish(self, None)
            elif nodes.ready:
                starting.start_launcher(self)
            return False
        if nodes.publish_due():  # the steps are read only when due: stats() sums every step so far
            nodes.publish(NodeState.RUNNING, self._steps_here())
        if self._stop_requested or self._node_cause is not None:
            return True
        self._node_cause = nodes.check()
        if self._node_cause is not None:
            self.log.error("%s", self._node_cause.message)
            # Ranks whose peers are gone cannot finish a collective: no use giving them long.
            self.stop(grace=NODE_LOST_GRACE_S)
            return False
        return True
