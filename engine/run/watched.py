"""What the app reads of a run, whichever kind it is: one it started (lifecycle.Run) or one it
follows from its folder (records/follow.FollowedRun). The app's run controller holds either
through this Protocol, and the one thread that owns the run is the only one that calls it; a
run's states (RunState) and the rule that says how it ended."""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from typing import Any, Protocol

from mgpu_tui.engine.nodes.view import NodeView
from mgpu_tui.engine.protocol.rundir import RunDir
from mgpu_tui.engine.run.causes.watchdog import Stall
from mgpu_tui.engine.run.figures.aggregate import RunStats
from mgpu_tui.engine.run.summary import RunSummary

Series = tuple[list[int], list[float], list[float | None]]  # steps, global samples/s, loss


class WatchedRun(Protocol):
    run_dir: RunDir
    summary: RunSummary | None  # once it has ended (a followed run cut off never has one)
    stopped_rank: int | None  # the rank the user stopped on its own (the app's x), once its signal went

    @property
    def stall(self) -> Stall | None:
        """The stall found, with its verdict: as the stall watch found it, or as its summary says."""
        ...

    def poll(self) -> RunState:
        """Read what is new; the state it is in now."""
        ...

    def stop(self) -> object:
        """Stop it: a started run ends its ranks; a followed one asks its monitor (follow.py)."""
        ...

    def close(self) -> None: ...

    def stats(self) -> RunStats: ...

    def series(self) -> Series: ...

    def whole_series(self) -> Series: ...

    def drain_log_lines(self) -> tuple[list[tuple[int, str, str]], int]: ...

    def stall_timeout(self) -> float: ...

    def nodes(self) -> tuple[NodeView, ...]: ...

    def node_machines(self) -> Mapping[int, Any]: ...

    def stalled_ranks(self) -> frozenset[int] | None: ...

    def rank_processes(self) -> dict[int, tuple[int, str | None]]: ...

    def stop_rank(self, rank: int) -> str: ...


class RunState(str, Enum):
    """A run's state after a poll, whichever kind it is. A run this process started goes from
    CREATED to OK, FAILED or INTERRUPTED; one followed from its folder is RUNNING until its summary
    says how it ended, or CUT_OFF when its monitor ended without one."""

    CREATED = "created"
    RUNNING = "running"
    VERIFYING = "verifying"  # the ranks are done; the baseline is being retrained to compare
    OK = "ok"
    FAILED = "failed"
    INTERRUPTED = "interrupted"  # stopped on request before it finished
    CUT_OFF = "cut off"  # followed: its monitor was killed (or the machine restarted), no summary

    @property
    def finished(self) -> bool:
        return self in (RunState.OK, RunState.FAILED, RunState.INTERRUPTED, RunState.CUT_OFF)


def final_state(returncode: int | None, *, stalled: bool, stop_requested: bool) -> RunState:
    """How a run ended: a stall (or a full disk) that stopped it is a failure; a stop asked for,
    an interruption; otherwise the launcher's exit code decides."""
    if stalled:
        return RunState.FAILED
    if stop_requested:
        return RunState.INTERRUPTED
    return RunState.OK if returncode == 0 else RunState.FAILED
