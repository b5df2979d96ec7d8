"""The run's process tree: start the launcher, know every process it begets, end them all.

The tree: mgpu-tui -> the keeper (launch/keeper.py) -> the launcher (torchrun, or python for a
one-process mode, or a command as given) -> the ranks -> whatever the ranks start. For a mode's
run and the app, the keeper starts in its own session: a Ctrl-C reaches mgpu-tui alone, which
stops the run in order. A launch line the user wrote (``exec``, the torchrun drop-in, headless)
runs in the foreground, as a shell runs it: in mgpu-tui's process group, with its stdin, so a
Ctrl-C reaches the job itself. The keeper is the run's subreaper either way: no process of the
run slips out of the tree, and it ends the tree when mgpu-tui dies, even by SIGKILL.

Every descendant seen while the run lived is recorded with its start time (so a reused
pid is never hit), and the child environment carries ``MGPU_RUN_ID`` so a final sweep
finds a process born and missed between two scans. Only recorded ranks are ever
signalled: a pid that a rank writes in its events is believed only when it is one of them.
"""

from __future__ import annotations

import logging
import os
import select
import signal
import subprocess
import time
from collections.abc import Iterable
from dataclasses import dataclass

import psutil

from mgpu_tui.engine.launch import priority
from mgpu_tui.engine.launch.command import Launch
from mgpu_tui.engine.launch.keeper import KeeperControl, term_when_parent_dies
from mgpu_tui.engine.protocol.environment import RUN_ID_ENV
from mgpu_tui.engine.protocol.text import short_line

MAX_PROCESSES_KEPT = 256  # a command's processes told in its summary (the busiest first)
COMMAND_CHARS = 200  # of a process's command line, kept
KEEPER_MODULE = "mgpu_tui.engine.launch.keeper"
STOP_GRACE_S = 5.0  # SIGTERM, then this long, then SIGKILL: torchrun's own 30 s is too long


@dataclass(frozen=True)
class ProcessSeen:
    """A process of a command's tree (exec) as the kernel told it: its command line (its first
    COMMAND_CHARS), CPU seconds and peak resident memory when last seen, the rank it was (its hello),
    or the rank it belongs to (a data-loader or compile worker: the nearest rank above it)."""

    pid: int
    command: str
    cpu_s: float | None
    rss_peak_bytes: int | None
    rank: int | None = None
    of_rank: int | None = None


class ProcessTree:
    def __init__(
        self,
        launch: Launch,
        run_id: str,
        nice: int,
        *,
        launcher_is_rank: bool,
        note_processes: bool = False,
        ranks_here: range = range(1 << 20),
        log: logging.LoggerAdapter | logging.Logger | None = None,
    ) -> None:
        self.log = log or logging.getLogger(__name__)
        self.ranks_here = ranks_here  # the global ranks this node starts
        self.launch = launch
        self.run_id = run_id
        self.nice = nice
        self.launcher_is_rank = launcher_is_rank  # a one-process mode: python itself is rank 0
        # A command's (mgpu-tui exec): what each process is and uses, for processes_seen; a run whose
        # ranks mgpu-tui starts itself does without these reads of /proc at each scan.
        self.note_processes = note_processes
        self.proc: subprocess.Popen | None = None  # the keeper
        self.launcher: int | None = None  # torchrun (or python), the keeper's first child
        self._known: dict[int, float] = {}  # pid -> create time, every descendant seen
        self._sessions: dict[int, int | None] = {}  # pid -> its session when last scanned
        self._pidfd: int | None = None
        self._control: KeeperControl | None = None  # the keeper's requests (launch/keeper.py)
        self.scanned_at = 0.0
        # pid -> (parent pid, command line, CPU seconds, peak RSS) as last scanned: what a command ran.
        self._seen: dict[int, tuple[int | None, str, float | None, int | None]] = {}

    # ---- start -----------------------------------------------------------------------

    def start(
        self, stdout, stderr, *, grace: float = STOP_GRACE_S, foreground: list[str] | None = None
    ) -> None:
        """Start the keeper and, below it, the launcher. ``grace``: the keeper's own, should mgpu-tui
        die; ``foreground``: as a shell runs a command, the keeper's arguments that say how
        (job_output.Foreground.keeper_args; None: in a session of its own, with no stdin)."""
        self._control = KeeperControl()
        keeper = [self.launch.python, "-m", KEEPER_MODULE, "--grace", str(grace), *self._control.argv()]
        keeper += foreground or []
        try:
            self.proc = subprocess.Popen(
                [*keeper, "--", *self.launch.argv],
                env=self.launch.env,
                stdin=None if foreground is not None else subprocess.DEVNULL,  # None: mgpu-tui's own
                stdout=stdout,
                stderr=stderr,
                start_new_session=foreground is None,
                pass_fds=(self._control.read,),
                cwd=os.getcwd(),
                preexec_fn=self._before_launcher_runs,
            )
        finally:
            self._control.started()
        self._known[self.proc.pid] = create_time(self.proc.pid) or 0.0
        self._lower(self.proc.pid, _session(self.proc.pid))

    @property
    def started(self) -> subprocess.Popen:
        """The keeper's process, once start() made it."""
        if self.proc is None:
            raise RuntimeError("the run's process tree has not been started")
        return self.proc

    def _before_launcher_runs(self) -> None:
        term_when_parent_dies()
        priority.nice_self(self.nice)

    # ---- what is alive ---------------------------------------------------------------

    def record_descendants(self) -> None:
        """Remember every process below the launcher now (a scan of /proc: not every poll)."""
        self.scanned_at = time.monotonic()
        try:
            children = psutil.Process(self.started.pid).children(recursive=True)
        except psutil.Error:
            return
        for child in children:
            if self.note_processes:
                self._note(child)
            session = _session(child.pid)
            if child.pid not in self._known:
                ctime = create_time(child.pid)
                if ctime is not None:
                    self._known[child.pid] = ctime
                    self._sessions[child.pid] = session
                    self._lower(child.pid, session)  # a rank's own session
                    if self.launcher is None and _parent(child) == self.started.pid:
                        self.launcher = child.pid
            elif session != self._sessions.get(child.pid):
                # Seen between its fork and its setsid (torchrun starts each rank in a session of
                # its own): the group lowered then was its parent's, and its own is lowered now.
                self._sessions[child.pid] = session
                self._lower(child.pid, session)

    def _lower(self, pid: int, session: int | None) -> None:
        """A process's session's scheduling group at the run's nice: never mgpu-tui's own (the shell's)."""
        if session is not None and session != os.getsid(0):
            priority.lower_group(pid, self.nice)

    def _note(self, proc: psutil.Process) -> None:
        """What a process is and has used so far (one /proc read or three), for processes_seen."""
        try:
            with proc.oneshot():
                ppid = proc.ppid()
                times = proc.cpu_times()
                rss = proc.memory_info().rss
                known = self._seen.get(proc.pid)
                command = (
                    known[1] if known else short_line(" ".join(proc.cmdline()) or proc.name(), COMMAND_CHARS)
                )
        except psutil.Error:
            return
        peak = max(rss, known[3] or 0) if known else rss
        self._seen[proc.pid] = (ppid, command, round(times.user + times.system, 2), peak)

    def processes_seen(self, ranks: dict[int, int]) -> tuple[ProcessSeen, ...]:
        """Every process of the tree below the keeper, as last scanned, the busiest first; ``ranks``:
        rank -> pid of the ranks believed (their own pids, recorded here). Each other process is
        put under the nearest rank above it, if any."""
        self.record_descendants()
        rank_of = {pid: rank for rank, pid in ranks.items()}
        found = []
        for pid, (ppid, command, cpu, peak) in self._seen.items():
            above, owner = ppid, None
            for _ in range(64):  # up the tree to the nearest rank
                if above is None or above in rank_of:
                    owner = rank_of.get(above) if above is not None else None
                    break
                above = self._seen.get(above, (None,))[0]
            found.append(
                ProcessSeen(pid, command, cpu, peak, rank_of.get(pid), None if pid in rank_of else owner)
            )
        found.sort(key=lambda p: -(p.cpu_s or 0.0))
        return tuple(found[:MAX_PROCESSES_KEPT])

    def children_cpu_s(self, pids: list[int]) -> dict[int, float]:
        """For each recorded process of ``pids`` still alive, the CPU seconds its descendants have
        used (the ones it reaped included): one scan of the processes for all. A rank busy through
        its children (a compiler) is not stalled."""
        mine = [pid for pid in pids if self.is_descendant(pid)]
        if not mine:
            return {}
        parent: dict[int, int] = {}
        used: dict[int, float] = {}
        for proc in psutil.process_iter(["ppid", "cpu_times"]):
            times = proc.info["cpu_times"]
            parent[proc.pid] = proc.info["ppid"]
            if times is not None:
                used[proc.pid] = times.user + times.system + times.children_user + times.children_system
        found = {}
        for pid in mine:
            try:
                own = psutil.Process(pid).cpu_times()
            except psutil.Error:
                continue
            total = own.children_user + own.children_system
            for child, cpu in used.items():
                above, depth = parent.get(child), 0
                while above is not None and above != pid and depth < 64:
                    above, depth = parent.get(above), depth + 1
                if above == pid:
                    total += cpu
            found[pid] = total
        return found

    def known(self) -> tuple[tuple[int, float], ...]:
        """Every process this tree recorded, with its start time: (pid, create time). A copy,
        safe to take from another thread (telemetry's, which counts their CPU as the run's own)."""
        return tuple(self._known.copy().items())

    def was_rank(self, pid: int) -> bool:
        """Whether ``pid`` was recorded in this run's tree below the launcher: a rank, or a
        process a rank started. Never the keeper, nor torchrun, which run no user code: no
        rank's word sends them a signal. (A one-process mode's launcher is rank 0 itself.)"""
        if pid not in self._known or pid == self.started.pid:
            return False
        return pid != self.launcher or self.launcher_is_rank

    def is_rank_here(self, rank: int, pid: int) -> bool:
        """Whether a hello's (rank, pid) can be believed: a rank this node starts, and a process
        this tree recorded (on several nodes, another node's pid numbers mean nothing here)."""
        return rank in self.ranks_here and self.was_rank(pid)

    def is_descendant(self, pid: int) -> bool:
        """Whether ``pid`` is such a process now (still alive, and still the same process)."""
        if not self.was_rank(pid):
            return False
        now = create_time(pid)
        return now is not None and abs(now - self._known[pid]) <= 0.01

    def process_state(self, pid: int) -> str:
        """A recorded process's state: "stopped" (SIGSTOP, a debugger), "running" (or sleeping:
        alive and able to run), or "gone"."""
        if not self.is_descendant(pid):
            return "gone"
        try:
            status = psutil.Process(pid).status()
        except psutil.Error:
            return "gone"
        if status in (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP):
            return "stopped"
        return "gone" if status in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD) else "running"

    def kill_ranks(self) -> list[int]:
        """SIGKILL every recorded process below the launcher (the ranks and what they started),
        leaving torchrun to see them gone, write its report and exit."""
        victims = [p for p in self._alive_known() if self.was_rank(p.pid)]
        for proc in victims:
            try:
                proc.kill()
            except psutil.Error:
                pass
        return [p.pid for p in victims]

    def signal(self, pids: Iterable[int], sig: signal.Signals) -> list[int]:
        """Send ``sig`` to those of ``pids`` that are this run's descendants; the pids signalled."""
        sent = []
        for pid in pids:
            if not self.is_descendant(pid):
                self.log.warning("not signalling pid %d: a rank named it, but it is not of this run", pid)
                continue
            try:
                os.kill(pid, sig)
                sent.append(pid)
            except OSError:
                pass
        return sent

    def returncode(self) -> int | None:
        return self.started.poll()

    def sleep_unless_exit(self, seconds: float) -> None:
        """Sleep until the launcher exits or ``seconds`` pass, whichever is first.

        A pidfd wakes us exactly once; Popen.wait(timeout) would wake every 50 ms.
        """
        if self._pidfd is None:
            try:
                self._pidfd = os.pidfd_open(self.started.pid)
            except (AttributeError, OSError):  # not Linux 5.3+: plain sleep
                self._pidfd = -1
        if self._pidfd >= 0:
            select.select([self._pidfd], [], [], seconds)
        else:
            time.sleep(seconds)

    # ---- the end ---------------------------------------------------------------------

    def terminate(self, grace: float) -> None:
        """SIGTERM to the job's process group, through the keeper (torchrun passes it to the ranks),
        which SIGKILLs what is left after ``grace``; past ``grace`` and a second, SIGKILL to all."""
        self.record_descendants()
        self.pass_signal(signal.SIGTERM, grace)
        deadline = time.monotonic() + grace + 1.0
        while self.started.poll() is None and time.monotonic() < deadline:
            self.record_descendants()
            time.sleep(0.05)
        if self.started.poll() is None:
            self.kill_all()
        self.started.wait()

    def pass_signal(self, sig: int, grace: float) -> None:
        """``sig`` to the job's process group (not again where it has just had it: a Ctrl-C), by
        the keeper, and SIGKILL to all that is left ``grace`` seconds later."""
        if self._control is not None:
            self._control.signal(sig, grace)

    def kill_now(self) -> None:
        """SIGKILL to every process of the run, by the keeper, now (a second Ctrl-C)."""
        if self._control is not None:
            self._control.kill()

    def kill_all(self) -> None:
        """SIGKILL every recorded descendant still alive, and any process that carries the run's id."""
        victims = {p.pid: p for p in self._alive_known() + self._tagged()}
        if victims:
            self.log.info("killing what is left of the run: pids %s", sorted(victims))
        for proc in victims.values():
            try:
                proc.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(list(victims.values()), timeout=3)

    def close(self) -> None:
        if self._control is not None:
            self._control.close()
        if self._pidfd is not None and self._pidfd >= 0:
            os.close(self._pidfd)
            self._pidfd = -1

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

    def _tagged(self) -> list[psutil.Process]:
        """Processes whose environment names this run: ranks born between two scans. Only those born
        since the keeper are read (the run's are younger; every run's end waits for this scan)."""
        found = []
        me = os.getpid()
        born = self._known.get(self.proc.pid, 0.0) if self.proc is not None else 0.0
        for proc in psutil.process_iter():
            try:
                young = not born or proc.create_time() >= born - 0.01  # (the kernel's ticks: 10 ms)
                if proc.pid != me and young and proc.environ().get(RUN_ID_ENV) == self.run_id:
                    found.append(proc)
            except psutil.Error:
                continue
        return found


def _parent(proc: psutil.Process) -> int | None:
    try:
        return proc.ppid()
    except psutil.Error:
        return None


def _session(pid: int) -> int | None:
    """The session ``pid`` is in now; None when it is gone."""
    try:
        return os.getsid(pid)
    except OSError:
        return None


def create_time(pid: int) -> float | None:
    """When the process started (seconds since the epoch, from the kernel's ticks after boot): with
    its pid, the process itself, since a pid alone may be reused; None when it is gone."""
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None
