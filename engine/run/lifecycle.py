"""One run of a mode: start it, follow it, stop it, and leave nothing behind.

The launcher (torchrun, or python for one-process modes) starts in its own
session, so a Ctrl-C at the terminal reaches mgpu-tui alone, which then stops
the run in order. torchrun also starts each rank in a session of its own, so
killing torchrun alone would orphan them: every descendant seen while the run
lived is recorded (pid and start time, so a reused pid is never hit), and the
child environment carries ``MGPU_RUN_ID`` so a final sweep finds any rank that
was born and missed between two polls.

Stopping: SIGTERM to the launcher (torchrun passes it on to its ranks), a grace
period, then SIGKILL to the launcher and every recorded descendant still alive.
"""

from __future__ import annotations

import collections
import ctypes
import os
import select
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

import psutil

from mgpu_tui.engine.launch import priority
from mgpu_tui.engine.launch.command import RUN_ID_ENV, Launch, build_command
from mgpu_tui.engine.launch.spec import LaunchSpec, ResolvedSpec, resolve
from mgpu_tui.engine.machine import host as host_module
from mgpu_tui.engine.protocol.events import MAX_LINE_BYTES, MalformedEvent, parse_line
from mgpu_tui.engine.run.aggregate import Aggregator, RunStats
from mgpu_tui.engine.run.rootcause import RootCause, find_root_cause
from mgpu_tui.engine.run.rundir import RunDir
from mgpu_tui.engine.run.summary import build_summary
from mgpu_tui.engine.run.tail import FileTail
from mgpu_tui.engine.run.verify import run_verify

# New lines waiting for a display to drain them; beyond this the oldest are dropped (and counted).
NEW_LINES_KEPT = 5000
# Once every rank has said hello, the process tree is rescanned this rarely: each
# scan reads all of /proc, and on a machine whose cores the ranks fill, every
# wake-up of the monitor delays a rank (and so the whole synchronous job).
TREE_RESCAN_S = 5.0
STALL_CHECK_S = 2.0
STACKS_WAIT_S = 3.0  # how long ranks get to write their stacks after SIGUSR2


class RunState(str, Enum):
    CREATED = "created"
    RUNNING = "running"
    OK = "ok"
    FAILED = "failed"
    INTERRUPTED = "interrupted"  # stopped on request before it finished

    @property
    def finished(self) -> bool:
        return self in (RunState.OK, RunState.FAILED, RunState.INTERRUPTED)


@dataclass(frozen=True)
class RunResult:
    state: RunState
    exit_code: int | None  # the launcher's
    root_cause: RootCause | None
    started_at: float
    ended_at: float
    summary: dict


class Run:
    """A run of one resolved spec in one run directory."""

    def __init__(
        self,
        resolved: ResolvedSpec,
        run_dir: RunDir,
        *,
        python: str = sys.executable,
        environ: Mapping[str, str] | None = None,
        cpu_count: int | None = None,
    ) -> None:
        self.resolved = resolved
        self.run_dir = run_dir
        self.run_id = uuid.uuid4().hex
        self.python = python
        self.launch: Launch = build_command(
            resolved,
            run_dir,
            self.run_id,
            python=python,
            cpu_count=cpu_count or host_module.cpu_count(),
            base_env=os.environ if environ is None else environ,
        )
        self.state = RunState.CREATED
        self.aggregator = Aggregator()
        self.malformed_events = 0
        self._new_lines: collections.deque[tuple[int, str, str]] = collections.deque(maxlen=NEW_LINES_KEPT)
        self._new_lines_seen = 0
        self._lines_lock = threading.Lock()
        self.result: RunResult | None = None
        self._proc: subprocess.Popen | None = None
        self._known: dict[int, float] = {}  # pid -> create time, every descendant seen
        self._event_tails: dict[int, FileTail] = {}
        self._log_tails: dict[tuple[int, str], FileTail] = {}
        self._started_at = 0.0
        self._stop_requested = False
        self._tree_scanned_at = 0.0
        self._stall_checked_at = 0.0
        self.stall: dict | None = None  # filled when some rank stopped reporting
        self._pidfd: int | None = None

    # ---- construction from a user's request ----------------------------------

    @classmethod
    def prepare(
        cls, spec: LaunchSpec, host: host_module.Host | None = None, *, name: str | None = None, **kwargs
    ) -> Run:
        """Resolve the spec, create its run directory and write ``spec.json``.

        ``name`` ends the run folder's name (default: the mode's). Raises SpecError,
        EnvironmentUnusable or RunDirError, each with a sentence for the user.
        """
        resolved = resolve(spec, host or host_module.probe())
        name = name or resolved.mode.name
        if spec.nnodes > 1:  # the nodes of one job share a folder when their run roots are shared
            run_dir = RunDir.create(spec.run_root, name, node=spec.node_rank, shared=spec.rdzv_id)
        else:
            run_dir = RunDir.create(spec.run_root, name)
        run = cls(resolved, run_dir, **kwargs)
        run_dir.write_json(
            run_dir.spec_path,
            {
                "spec": resolved.to_json(),
                "run_id": run.run_id,
                "argv": list(run.launch.argv),
                "env_changes": run.launch.env_changes,
                "created_at": time.time(),
            },
        )
        return run

    # ---- lifecycle ---------------------------------------------------------------

    def start(self) -> None:
        if self._proc is not None:
            raise RuntimeError("this run was already started")
        self.run_dir.logs_dir.mkdir(parents=True, exist_ok=True)
        if self.resolved.mode.multi_process:
            out = err = open(self.run_dir.launcher_log, "wb")
        else:
            # One process is rank 0 itself: its output goes where torchrun would put it.
            rank_dir = self.run_dir.python_rank_dir()
            rank_dir.mkdir(parents=True, exist_ok=True)
            out, err = open(rank_dir / "stdout.log", "wb"), open(rank_dir / "stderr.log", "wb")
        try:
            self._started_at = time.time()
            self._proc = subprocess.Popen(
                self.launch.argv,
                env=self.launch.env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
                cwd=os.getcwd(),
                preexec_fn=self._before_launcher_runs,
            )
        finally:
            out.close()
            err.close()
        self._known[self._proc.pid] = _create_time(self._proc.pid) or 0.0
        priority.lower_group(self._proc.pid, self.resolved.spec.nice)
        self.state = RunState.RUNNING

    def _before_launcher_runs(self) -> None:
        _term_when_parent_dies()
        priority.nice_self(self.resolved.spec.nice)

    def poll(self) -> RunState:
        """Read what is new, and notice the end of the run. Never blocks for long."""
        if self._proc is None or self.state.finished:
            return self.state
        self._read_files()
        if time.monotonic() - self._stall_checked_at >= STALL_CHECK_S:
            self._stall_checked_at = time.monotonic()
            self._watch_stall()
            if self.state.finished:
                return self.state
        all_ranks_known = len(self.aggregator.rank_processes()) >= self.resolved.world_size
        if not all_ranks_known or time.monotonic() - self._tree_scanned_at >= TREE_RESCAN_S:
            self._record_descendants()
        returncode = self._proc.poll()
        if returncode is not None:
            self._finish(returncode)
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
            self._sleep_unless_exit(interval)
        if on_poll and self.state.finished:
            on_poll(self)
        return self.state

    def stop(self, grace: float = 5.0) -> RunState:
        """Stop every process of the run: SIGTERM, ``grace`` seconds, then SIGKILL."""
        if self._proc is None or self.state.finished:
            return self.state
        self._stop_requested = True
        self._record_descendants()
        try:
            self._proc.send_signal(signal.SIGTERM)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + grace
        while self._proc.poll() is None and time.monotonic() < deadline:
            self._record_descendants()
            time.sleep(0.05)
        if self._proc.poll() is None:
            self._kill_known()
        self._proc.wait()
        return self.poll()

    def verify(self) -> dict:
        """Compare the finished run's parameters with the baseline; adds ``verify`` to the summary.

        Takes a few seconds (it retrains the baseline in a child process).
        """
        if self.result is None or self.result.state is not RunState.OK:
            raise RuntimeError("only a run that finished ok can be verified")
        outcome = run_verify(self.resolved, self.run_dir, python=self.python, env=self.launch.env)
        self.result.summary["verify"] = outcome
        self.run_dir.write_json(self.run_dir.summary_path, self.result.summary)
        return outcome

    def close(self) -> None:
        """Make sure nothing of this run is alive, whatever state it is in."""
        # Stopping ends in _finish, which kills and sweeps whatever is left; a run
        # that already finished was swept then.
        if self._proc is not None and not self.state.finished:
            self.stop(grace=0)

    def __enter__(self) -> Run:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _watch_stall(self) -> None:
        """A rank that reported before but has been silent for the stall timeout stalls the run.

        Then every rank is asked for its Python stacks (SIGUSR2; the reporter writes them to
        stacks/rank<N>.txt), and with on_stall "stop" the run is stopped and fails with the stall
        as its root cause. Ranks that have not said hello yet are still starting, not stalled.
        """
        if self.stall is not None or self._stop_requested:
            return
        spec = self.resolved.spec
        timeout = spec.stall_timeout or max(30.0, 10 * (self.aggregator.recent_step_time() or 0.0))
        now = time.time()
        stuck = [(rank, last_step, now - last_t)
                 for rank, last_t, last_step, done in self.aggregator.liveness()
                 if not done and last_t is not None and now - last_t > timeout]  # fmt: skip
        if not stuck:
            return
        for pid, _ in self.aggregator.rank_processes().values():
            try:
                os.kill(pid, signal.SIGUSR2)
            except OSError:
                pass
        stacks_dir = self.run_dir.path / "stacks"
        deadline = time.monotonic() + STACKS_WAIT_S
        while time.monotonic() < deadline and not all(
            (stacks_dir / f"rank{rank}.txt").exists() and (stacks_dir / f"rank{rank}.txt").stat().st_size
            for rank, _, _ in stuck
        ):
            time.sleep(0.1)
        self.stall = {
            "timeout_s": timeout,
            "ranks": [{"rank": r, "last_step": step, "silent_s": round(silent, 1)}
                      for r, step, silent in stuck],  # fmt: skip
            "stacks_dir": str(stacks_dir),
        }
        if spec.on_stall == "stop":
            self.stop()

    def _stall_cause(self) -> RootCause:
        """The stall as a root cause: every stuck rank's stacks, since steps alone cannot tell
        the rank that hung from the ranks waiting for it in a collective."""
        stuck = sorted(self.stall["ranks"], key=lambda r: (r["last_step"], r["rank"]))
        where = ", ".join(f"rank {r['rank']} at step {r['last_step']}" for r in stuck)
        parts = []
        for r in stuck:
            try:
                text = (Path(self.stall["stacks_dir"]) / f"rank{r['rank']}.txt").read_text().strip()
            except OSError:
                text = ""
            parts.append(f"--- rank {r['rank']} ---\n{text or '(no stacks: the rank has no reporter)'}")
        message = f"stalled: no progress for {self.stall['timeout_s']:.0f} s ({where})"
        return RootCause(stuck[0]["rank"], None, None, message, "\n".join(parts))

    def _sleep_unless_exit(self, seconds: float) -> None:
        """Sleep until the launcher exits or ``seconds`` pass, whichever is first.

        A pidfd wakes us exactly once; Popen.wait(timeout) would wake every 50 ms.
        """
        if self._pidfd is None:
            try:
                self._pidfd = os.pidfd_open(self._proc.pid)
            except (AttributeError, OSError):  # not Linux 5.3+: plain sleep
                self._pidfd = -1
        if self._pidfd >= 0:
            select.select([self._pidfd], [], [], seconds)
        else:
            time.sleep(seconds)

    # ---- reading -----------------------------------------------------------------

    def stats(self) -> RunStats:
        return self.aggregator.stats()

    def drain_log_lines(self) -> tuple[list[tuple[int, str, str]], int]:
        """(rank, stream, line) read since the last drain, and how many were dropped unshown.

        A display that cannot keep up loses only lines from its screen: the files keep them all.
        """
        with self._lines_lock:
            lines = list(self._new_lines)
            dropped = self._new_lines_seen - len(lines)
            self._new_lines.clear()
            self._new_lines_seen = 0
        return lines, dropped

    def rank_processes(self) -> dict[int, tuple[int, str | None]]:
        """Rank -> (pid, CUDA UUID): a telemetry Sampler's ``ranks`` source."""
        return self.aggregator.rank_processes()

    def _read_files(self) -> None:
        for rank, path in self.run_dir.event_files().items():
            if rank not in self._event_tails:
                self._event_tails[rank] = FileTail(path, max_line=MAX_LINE_BYTES)
        # Every known file, listed or not: one deleted mid-run is still followed by its descriptor.
        for tail in self._event_tails.values():
            before = tail.dropped_long_lines
            for line in tail.read_lines():
                try:
                    self.aggregator.add(parse_line(line))
                except MalformedEvent:
                    self.malformed_events += 1
            self.malformed_events += tail.dropped_long_lines - before
        for local, files in self.run_dir.rank_files().items():
            for stream, path in (("stdout", files.stdout), ("stderr", files.stderr)):
                tail = self._log_tails.get((local, stream))
                if tail is None or tail.path != path:  # a new attempt has new files
                    if tail is not None:
                        tail.close()
                    tail = self._log_tails[(local, stream)] = FileTail(path, max_line=64 * 1024)
                lines = [line.decode("utf-8", "replace") for line in tail.read_lines()]
                if lines:
                    with self._lines_lock:
                        self._new_lines.extend((local, stream, line) for line in lines)
                        self._new_lines_seen += len(lines)

    # ---- processes ---------------------------------------------------------------

    def _record_descendants(self) -> None:
        self._tree_scanned_at = time.monotonic()
        try:
            children = psutil.Process(self._proc.pid).children(recursive=True)
        except psutil.Error:
            return
        for child in children:
            if child.pid not in self._known:
                ctime = _create_time(child.pid)
                if ctime is not None:
                    self._known[child.pid] = ctime
                    priority.lower_group(child.pid, self.resolved.spec.nice)  # a rank's own session

    def _alive_known(self) -> list[psutil.Process]:
        alive = []
        for pid, ctime in self._known.items():
            try:
                proc = psutil.Process(pid)
                if ctime and abs(proc.create_time() - ctime) > 0.01:
                    continue  # the pid was reused by an unrelated process
                if proc.status() != psutil.STATUS_ZOMBIE:
                    alive.append(proc)
            except psutil.Error:
                continue
        return alive

    def _tagged_processes(self) -> list[psutil.Process]:
        """Processes whose environment names this run: ranks born between two polls."""
        found = []
        me = os.getpid()
        for proc in psutil.process_iter():
            if proc.pid == me:
                continue
            try:
                if proc.environ().get(RUN_ID_ENV) == self.run_id:
                    found.append(proc)
            except psutil.Error:
                continue
        return found

    def _kill_known(self) -> None:
        victims = {p.pid: p for p in self._alive_known() + self._tagged_processes()}
        for proc in victims.values():
            try:
                proc.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(list(victims.values()), timeout=3)

    # ---- the end -----------------------------------------------------------------

    def _finish(self, returncode: int) -> None:
        # torchrun has ended its ranks when it exits normally; anything still alive
        # (after a hard kill, say) must not outlive the run.
        self._kill_known()
        self._read_files()
        if self.stall is not None and self.resolved.spec.on_stall == "stop":
            state = RunState.FAILED
        elif self._stop_requested:
            state = RunState.INTERRUPTED
        elif returncode == 0:
            state = RunState.OK
        else:
            state = RunState.FAILED
        root_cause = None
        if state is RunState.FAILED and self.stall is not None:
            root_cause = self._stall_cause()
        elif state is RunState.FAILED:
            root_cause = find_root_cause(
                self.run_dir,
                launcher_exit_code=returncode,
                single_process=not self.resolved.mode.multi_process,
                rank_offset=self.resolved.spec.node_rank * (self.resolved.spec.nproc or 1),
            )
        ended = time.time()
        stats = self.stats()
        summary = build_summary(
            self.resolved,
            self.run_dir,
            stats,
            status=state.value,
            exit_code=returncode,
            root_cause=root_cause,
            started_at=self._started_at,
            ended_at=ended,
            malformed_events=self.malformed_events,
        )
        summary["stall"] = self.stall
        self.run_dir.write_json(self.run_dir.summary_path, summary)
        for tail in [*self._event_tails.values(), *self._log_tails.values()]:
            tail.close()
        if self._pidfd is not None and self._pidfd >= 0:
            os.close(self._pidfd)
            self._pidfd = -1
        self.result = RunResult(state, returncode, root_cause, self._started_at, ended, summary)
        self.state = state


_PR_SET_PDEATHSIG = 1


def _term_when_parent_dies() -> None:
    """In the launcher, before it runs: get SIGTERM when mgpu-tui dies, even by SIGKILL.

    torchrun then stops its ranks, so a killed mgpu-tui leaves none behind. Linux ties
    this to the thread that started the child: runs are started from the main thread.
    """
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the other safeguards remain
        pass


def _create_time(pid: int) -> float | None:
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None
