"""A rank's state, in one word: the rule the Run view's table and the metrics (engine/run/metrics/)
both follow, so that a dashboard and the app never disagree about a rank (docs/run-view.md:
"States"; docs/metrics.md)."""

from __future__ import annotations

from collections.abc import Mapping

from mgpu_tui.engine.protocol.causes import PEER_LOST
from mgpu_tui.engine.protocol.typed import Word
from mgpu_tui.engine.run.figures.rank_stats import RankStats


class RankState(Word):
    """A rank as the Run view's table and the metrics say it."""

    STARTING = "starting"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    NO_PEER = "no peer"  # it failed only because another rank had: its error is its peer gone
    STALLED = "stalled"
    SILENT = "silent"  # a script's rank past the stall timeout, with no evidence it hangs
    STOPPED = "stopped"
    SLOW = "slow"  # a straggler: the others wait for it at every collective
    LOST = "lost"
    MISSING = "missing"


def rank_state(
    rank: RankStats | None,
    now: float,
    stall_after: float,
    failed_rank: int | None,
    finished: bool,
    ok: bool = False,
    number: int | None = None,
    stalled: frozenset[int] | None = None,
    hung: Mapping[int, int] | None = None,
) -> RankState:
    """STARTING, RUNNING, DONE, FAILED, STALLED (no event for ``stall_after`` s), SILENT, STOPPED.

    ``ok``: the run ended ok, so a rank that reported nothing (a script without the
    reporter) is done, not stopped. ``number``: the rank's number, when it reported nothing.
    ``stalled``: a script's run (whose silence is a stall only on evidence: watchdog.py), the ranks
    of the stall found; its other quiet ranks are silent. None: silence is a stall (a mode's run).
    ``hung``: the stall found, each of its ranks with its step then: once the run has ended, a rank
    that never moved past it stays stalled, whatever it said as it was stopped (never done).
    A straggler's RUNNING is SLOW where the caller knows it (:func:`with_stragglers`).
    """
    moving = rank is not None and rank.where is not None  # a script's rank that beats: it runs
    if rank is None or (rank.last_step == 0 and not rank.done and not moving):
        if failed_rank is not None and (rank.rank if rank is not None else number) == failed_rank:
            return RankState.FAILED  # a script without the reporter says nothing, but torchrun named it
        if finished and hung and (rank.rank if rank is not None else number) in hung:
            return RankState.STALLED  # it hung before its first step
        if finished:
            return RankState.DONE if ok else RankState.STOPPED
        return RankState.STARTING
    if rank.rank == failed_rank:
        return RankState.FAILED
    if rank.error:  # beside the culprit, a rank whose error is its peer gone only echoes it
        peer_gone = failed_rank is not None and PEER_LOST.search(rank.error)
        return RankState.NO_PEER if peer_gone else RankState.FAILED
    if finished and hung and rank.rank in hung and rank.last_step <= hung[rank.rank]:
        return RankState.STALLED
    if rank.done or (finished and ok):
        return RankState.DONE
    if finished:
        return RankState.STOPPED
    if rank.last_event_t is not None and now - rank.last_event_t > stall_after:
        return RankState.STALLED if stalled is None or rank.rank in stalled else RankState.SILENT
    return RankState.RUNNING


def with_stragglers(state: RankState, rank: int, slow: set[int] | frozenset[int]) -> RankState:
    """A running rank that the others wait for (a straggler: figures/stragglers.py) is SLOW."""
    return RankState.SLOW if state is RankState.RUNNING and rank in slow else state
