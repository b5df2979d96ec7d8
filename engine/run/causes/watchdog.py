"""The watchdog: what ends a run early, besides its own end.

- **A stall.** A rank that reported before and has been silent too long is silent. The rule lives
  here and only here (the engine and the app's rank table both ask :func:`stall_timeout`): a rank
  is silent when its last event is older than ``--stall-timeout``, or by default max(30 s, 10 x
  the job's recent median step time). Ranks that have not said hello are starting; ranks that said
  done are not watched. For a demo, silence is a stall. For a user's own program (whose bootstrap
  beats while its main thread moves: engine/rank/watch/script_watch.py), silence alone is only shown
  (:attr:`Watchdog.silent`): evaluations, checkpoints and compiles are long and quiet. It is a
  stall on evidence: every watched rank silent (no stack moved for the whole window), or the
  flight records showing ranks waiting in a collective that a silent rank never entered. Then the
  ranks that answer are asked for their Python stacks (requests/stacks; the reporter's thread writes them to
  ``stacks/rank<N>.txt``), and the stall is described as a root cause that carries them, since
  steps alone cannot tell the rank that hung from the ranks waiting for it in a collective.
- **A full disk.** Under MIN_FREE_BYTES free, the ranks' logs and events start to fail, and
  with them the ranks: the run is stopped first, and says why.
- **A failed rank's peers.** When a rank fails torchrun stops the others, but gives a rank
  that ignores SIGTERM 30 s (torch 2.13 applies its own 30 s on that path, whatever
  TORCH_ELASTIC_SHUTDOWN_TIMEOUT says). STOP_GRACE_S after torchrun said it began (its
  "closing signal" line), the engine kills the ranks still alive itself. Not with restarts:
  torchrun then stops ranks only to start them again; and under the drop-in only after its stop
  grace (torchrun's own --shutdown-timeout and a margin), so that torchrun's own end comes first.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from mgpu_tui.engine.launch.processes import STOP_GRACE_S, ProcessTree
from mgpu_tui.engine.launch.spec import ResolvedSpec
from mgpu_tui.engine.protocol.file_tail import FileTail
from mgpu_tui.engine.protocol.folder import read_capped
from mgpu_tui.engine.protocol.rundir import RunDir, stacks_file
from mgpu_tui.engine.protocol.typed import build
from mgpu_tui.engine.run.causes.rank_requests import STACKS_WAIT_S, request_flight_records, request_stacks
from mgpu_tui.engine.run.causes.rootcause import RootCause
from mgpu_tui.engine.run.ingest import Ingest
from mgpu_tui.engine.run.nccl.flight_records import MAIN_THREAD_LINE, hang_verdict, read_trace

DEFAULT_MIN_S = 30.0
STEPS_OF_SILENCE = 10  # the default timeout: this many recent median step times, at least DEFAULT_MIN_S
MAX_STACKS_BYTES = 256 * 1024  # a rank's stacks, as it wrote them
CHECK_EVERY_S = 1.0  # the stall rule is checked this often
MIN_FREE_BYTES = 8 << 20  # below this much room for the run directory, the run is stopped
CHILDREN_BUSY_S = 0.05  # CPU seconds a rank's children use between two looks that make it move


def stall_timeout(requested: float | None, recent_step_time: float | None) -> float:
    """Seconds of silence after which a rank is stalled (the one place this rule is written)."""
    if requested:
        return requested
    return max(DEFAULT_MIN_S, STEPS_OF_SILENCE * (recent_step_time or 0.0))


@dataclass(frozen=True)
class StalledRank:
    rank: int
    last_step: int
    silent_s: float
    # What the engine saw of the rank's process when it stalled: "stopped" (SIGSTOP, a
    # debugger: it cannot run at all), "running", "gone", or None when its process is unknown.
    process: str | None = None
    answers_stacks: bool = False  # its reporter said it answers a stack request
    # A job of one process that trained with no group (rank 0 of 1): its process, whose stacks file
    # is named by it (stacks/trainer<PID>.txt).
    trainer_pid: int | None = None

    def stacks_in(self, stacks_dir: Path | str) -> Path:
        """Where its answer to a stack request is."""
        pid = self.trainer_pid
        return stacks_file(stacks_dir, self.rank) if pid is None else stacks_file(stacks_dir, pid, True)


@dataclass(frozen=True)
class Stall:
    timeout_s: float
    ranks: tuple[StalledRank, ...]
    stacks_dir: str
    verdict: str | None = None  # why, from the flight recorder and stacks (run/nccl/flight_records.py)
    culprit: int | None = None  # the rank the verdict blames
    found_at: float | None = None  # when the stall watch declared it (Unix time)

    def to_json(self) -> dict:
        return {
            "timeout_s": self.timeout_s,
            # A rank's trainer_pid only where it has one: every other stall reads as before.
            "ranks": [{k: v for k, v in asdict(r).items() if k != "trainer_pid" or v} for r in self.ranks],
            "stacks_dir": self.stacks_dir,
            "verdict": self.verdict,
            "culprit": self.culprit,
            "found_at": self.found_at,
        }

    @classmethod
    def from_json(cls, document: dict) -> Stall:
        return build(cls, document)  # every field checked (protocol/typed.py)

    def root_cause(self) -> RootCause:
        """The stall as a root cause, with every stuck rank's stacks.

        A stopped process is the likeliest culprit (the others wait for it in a collective),
        so it comes first; then the rank furthest behind."""
        stuck = self._stuck()
        parts = []
        for r in stuck:
            try:
                text = readable_stacks(read_capped(r.stacks_in(self.stacks_dir), MAX_STACKS_BYTES))
            except OSError:
                text = ""
            parts.append(f"--- rank {r.rank} ---\n{text or _why_no_stacks(r)}")
        return RootCause(stuck[0].rank, None, None, self.headline(), "\n".join(parts), kind="stall")

    def _stuck(self) -> list[StalledRank]:
        return sorted(
            self.ranks, key=lambda r: (r.process != "stopped", r.rank != self.culprit, r.last_step, r.rank)
        )

    def headline(self) -> str:
        """The stall in one line, as its root cause says it (no file read: the app draws it live)."""
        stuck = self._stuck()
        where = ", ".join(f"rank {r.rank} at step {r.last_step}" for r in stuck)
        message = f"stalled: no progress for {self.timeout_s:.0f} s ({where})"
        if self.verdict:
            message = f"stalled for {self.timeout_s:.0f} s: {self.verdict}"
        stopped = stopped_ranks(stuck)
        if stopped and stopped not in message:
            message += f"; {stopped}"
        return message


def stopped_ranks(ranks: tuple[StalledRank, ...] | list[StalledRank]) -> str:
    """The stalled ranks whose process is stopped, in words ("" for none): the likeliest culprits,
    who cannot even answer for their stacks or flight records."""
    stopped = [r.rank for r in ranks if r.process == "stopped"]
    if not stopped:
        return ""
    verb = "is" if len(stopped) == 1 else "are"
    return (
        f"rank {', '.join(map(str, stopped))} {verb} stopped (SIGSTOP, Ctrl-Z or a debugger) and "
        "cannot run until continued (SIGCONT)"
    )


# Frames of mgpu-tui's own code in a rank: its two threads (the flight-record dumper's _loop, the
# watch's beats in _watch_stack, in whichever module of engine/rank they live), and the bootstrap's
# frames under the script's own. Left out of the stacks shown (stacks/rank<N>.txt keeps them).
_OWN_THREAD = re.compile(r'engine/rank/[\w/]+\.py", line \d+ in (_loop|_watch_stack)\b')
_OWN_FRAME = re.compile(r'^\s*File "(?:[^"]*engine/rank/bootstrap\.py|<frozen runpy>)"', re.M)


def readable_stacks(text: str) -> str:
    """A rank's stack dump as a user reads it: the threads of the script, its main thread first
    (named in the dump's first line by the reporter, which dumps from a thread of its own), without
    mgpu-tui's own threads and frames."""
    main = MAIN_THREAD_LINE.match(text)
    if main:
        text = text[main.end() :]
    blocks = [b.strip() for b in re.split(r"\n\s*\n", text.strip()) if b.strip()]
    kept = [b for b in blocks if not _OWN_THREAD.search(b)]
    first = f"Thread {main.group(1)}" if main else "Current thread"
    kept.sort(key=lambda b: not b.startswith(first))
    lines = [line for b in kept for line in [*b.splitlines(), ""] if not _OWN_FRAME.match(line)]
    return "\n".join(lines).strip()


def _why_no_stacks(rank: StalledRank) -> str:
    if rank.process == "stopped":
        return "(no stacks: the process is stopped, so it cannot answer)"
    if rank.process == "gone":
        return "(no stacks: the process has ended)"
    if not rank.answers_stacks:
        return "(no stacks: the rank has no reporter that answers a stack request)"
    return f"(no stacks: the rank did not answer within {STACKS_WAIT_S:.0f} s)"


# (rank, time of its last event, its last step, done) for every rank heard from.
Liveness = list[tuple[int, float | None, int, bool]]


def find_stalled(liveness: Liveness, timeout: float, now: float) -> tuple[StalledRank, ...]:
    return tuple(
        StalledRank(rank, last_step, round(now - last_t, 1))
        for rank, last_t, last_step, done in liveness
        if not done and last_t is not None and now - last_t > timeout
    )


class Watchdog:
    """Watches one run for a stall, a full disk and a failed rank's peers; ``stop`` ends the run.

    ``local_ranks()`` gives rank -> pid for this node's ranks whose pid the process tree holds:
    nothing else is ever signalled."""

    def __init__(
        self,
        resolved: ResolvedSpec,
        run_dir: RunDir,
        ingest: Ingest,
        tree: ProcessTree,
        *,
        local_ranks: Callable[[], dict[int, int]],
        stop: Callable[[], object],
        log: logging.LoggerAdapter | logging.Logger,
        ranks_here: Callable[[], range] | None = None,
    ) -> None:
        """``ranks_here()``: this node's ranks now (a command's are learned as they join)."""
        self.resolved, self.run_dir, self.ingest, self.tree = resolved, run_dir, ingest, tree
        self.local_ranks, self.stop, self.log = local_ranks, stop, log
        self.ranks_here = ranks_here or (lambda: resolved.ranks_here)
        self.stall: Stall | None = None  # once some rank stopped reporting
        # Ranks silent past the timeout, shown while no evidence makes their silence a stall.
        self.silent: tuple[StalledRank, ...] = ()
        self._probed_at = 0.0  # when the flight records were last asked whether a silence is a hang
        self.disk_full: str | None = None  # why the run was stopped for want of disk
        self._stall_checked_at = 0.0
        self._failed_at: float | None = None  # when torchrun began to stop the ranks after a failure
        self._ranks_killed = False
        self._children_cpu: dict[int, float | None] = {}  # silent rank -> its children's CPU seconds
        # torchrun's own log, followed for the line that says it is stopping the ranks.
        watch = resolved.mode.multi_process and resolved.spec.max_restarts == 0
        self._launcher_tail = FileTail(run_dir.launcher_log, max_line=64 * 1024) if watch else None

    def stall_timeout(self) -> float:
        return stall_timeout(self.resolved.spec.stall_timeout, self.ingest.recent_step_time())

    def check(self) -> None:
        """One look at the run (each poll); may call ``stop``. Never called once a stop began."""
        self._disk()
        if self.disk_full is None:
            self._failure()
        if self.disk_full is None and time.monotonic() - self._stall_checked_at >= CHECK_EVERY_S:
            self._stall_checked_at = time.monotonic()
            self._stall()

    def verdict(self, returncode: int | None) -> tuple[bool, RootCause | None]:
        """(whether the watchdog ended the run, the root cause it knows of) once the run is over:
        a full disk (also one that filled between two looks and failed the run), or a stall."""
        full_now = (self.run_dir.free_bytes() or MIN_FREE_BYTES) < 1 << 20
        if self.disk_full is not None or (returncode != 0 and full_now):
            why = self.disk_full or (
                "the disk that holds the run directory is full: the ranks could not write their logs"
            )
            return True, RootCause(None, returncode, None, why, "", kind="disk_full")
        if self.stall is not None:
            return self.resolved.on_stall == "stop", self.stall.root_cause()
        return False, None

    def close(self) -> None:
        if self._launcher_tail is not None:
            self._launcher_tail.close()

    def _working_children(self, stalled: tuple[StalledRank, ...]) -> tuple[StalledRank, ...]:
        """Of the silent ranks, those whose own child processes did not use the CPU since the last
        look: a rank waiting on its compiler (a C++ op being built) moves through it. Looked at only
        while some rank is silent (one scan of the processes for all of them); a rank first found
        silent moves until a second look can tell."""
        local = self.local_ranks()
        pids = {r.rank: local[r.rank] for r in stalled if r.rank in local}
        used = self.tree.children_cpu_s(list(pids.values())) if pids else {}
        still = []
        for r in stalled:
            now = used.get(pids.get(r.rank, -1))
            before = self._children_cpu.get(r.rank)
            self._children_cpu[r.rank] = now
            working = now is not None and (before is None or now - before >= CHILDREN_BUSY_S)
            if not working:
                still.append(r)
        for rank in set(self._children_cpu) - {r.rank for r in stalled}:
            del self._children_cpu[rank]  # it spoke: its next silence starts afresh
        return tuple(still)

    def _stall(self) -> None:
        if self.stall is not None:
            return
        timeout = self.stall_timeout()
        liveness = self.ingest.liveness()
        stalled = self._working_children(find_stalled(liveness, timeout, time.time()))
        self.silent = stalled
        if not stalled:
            return
        if self.resolved.stall_evidence and not self._evidence(liveness, stalled, timeout):
            return
        stacks_dir = self.run_dir.stacks_dir
        # The ranks that answer (their reporter says so, and has not closed): the others are said
        # to have no reporter that answers, in the stall's account.
        local = self.local_ranks()
        answering = {rank for rank, pid in self.ingest.stack_answering().items() if local.get(rank) == pid}
        lone = self.ingest.lone_trainer_pid()  # a job of one process: its stacks are named by its pid
        stalled = tuple(
            dataclasses.replace(
                r,
                process=self.tree.process_state(local[r.rank]) if r.rank in local else None,
                answers_stacks=r.rank in answering,
                trainer_pid=lone if r.rank == 0 else None,
            )
            for r in stalled
        )
        who = ", ".join(f"rank {r.rank} (step {r.last_step})" for r in stalled)
        self.log.warning("stalled: %s silent for over %.0f s; asking for stacks", who, timeout)
        asked = request_flight_records(self.run_dir.path)  # answered by a thread of each rank
        request_stacks((r.stacks_in(stacks_dir) for r in stalled), self.run_dir.path)
        verdict, culprit = self._verdict(stalled, stacks_dir, asked) or (None, None)
        if verdict is None and (stopped := stopped_ranks(stalled)):  # what the console says, kept
            verdict, culprit = stopped, next(r.rank for r in stalled if r.process == "stopped")
        if verdict:
            self.log.warning("hang verdict: %s", verdict)
        self.stall = Stall(timeout, stalled, str(stacks_dir), verdict, culprit, found_at=time.time())
        if self.resolved.on_stall == "stop":
            self.stop()

    def _evidence(self, liveness: Liveness, silent: tuple[StalledRank, ...], timeout: float) -> bool:
        """Whether a program's silence is a hang: every watched rank of this node is silent (none
        moved for the whole window), or (asked at most once a window) the flight records show a
        silent rank that never entered a collective the others wait in."""
        quiet = {r.rank for r in silent}
        here = self.ranks_here()
        watched = {rank for rank, t, _, done in liveness if not done and t is not None and rank in here}
        if watched and watched <= quiet:
            return True
        if time.monotonic() - self._probed_at < timeout:
            return False
        self._probed_at = time.monotonic()
        found = self._verdict((), Path(), request_flight_records(self.run_dir.path))
        if found is not None and found[1] in quiet:
            return True
        moving = ", ".join(map(str, sorted(watched - quiet))) or "none"
        who = ", ".join(f"rank {r.rank}" for r in silent)
        self.log.info(
            "silent for over %.0f s: %s; rank(s) %s still move: shown, not acted on", timeout, who, moving
        )
        return False

    def _verdict(
        self, stalled: tuple[StalledRank, ...], stacks_dir: Path, asked: float | None
    ) -> tuple[str, int] | None:
        """The flight-recorder verdict over this node's ranks, once their dumps are in (or a few
        seconds have passed)."""
        here = self.ranks_here()  # the ranks heard from: one that never said hello keeps no record
        ranks = sorted(rank for rank in self.ingest.rank_processes() if rank in here)
        records = self.run_dir.flight_record_path
        deadline = time.monotonic() + STACKS_WAIT_S

        def fresh(rank: int) -> bool:
            if asked is None:  # the request could not be made: no answer is this one's
                return False
            try:
                return records(rank).stat().st_mtime >= asked
            except OSError:
                return False

        while asked is not None and time.monotonic() < deadline and not all(fresh(rank) for rank in ranks):
            time.sleep(0.1)
        traces = {rank: read_trace(records(rank), self.run_dir.path) for rank in ranks if fresh(rank)}
        stacks = {}
        for r in stalled:
            try:
                stacks[r.rank] = read_capped(
                    r.stacks_in(stacks_dir), MAX_STACKS_BYTES, root=self.run_dir.path
                )
            except OSError:
                continue
        return hang_verdict(traces, stacks, time.time_ns())

    def _disk(self) -> None:
        free = self.run_dir.free_bytes()
        if self.disk_full is None and free is not None and free < MIN_FREE_BYTES:
            self.disk_full = (
                f"the disk that holds the run directory is full ({free >> 10} KiB left): "
                "every rank was stopped before its logs and events were lost"
            )
            self.log.error("%s", self.disk_full)
            self.stop()

    def _failure(self) -> None:
        if self._ranks_killed or self._launcher_tail is None:
            return
        if self._failed_at is None:
            if any(b"closing signal" in line for line in self._launcher_tail.read_lines()):
                self._failed_at = time.monotonic()
                self.log.warning("torchrun is stopping the ranks after a failure")
        elif time.monotonic() - self._failed_at > (grace := self.resolved.spec.stop_grace or STOP_GRACE_S):
            self._ranks_killed = True
            killed = self.tree.kill_ranks()
            if killed:
                self.log.warning(
                    "%.0f s after a rank failed, %d process(es) still ran: killed %s",
                    grace,
                    len(killed),
                    killed,
                )
