"""The app's messages: what worker threads report, and what a view asks the app to do.

Worker threads post data and never touch widgets; the app posts each piece of news on to every
view built (each view owns its handler: ``on_run_updated`` in the Run view, and so on; news does
not bubble back up from a view).
Telemetry and run progress arrive faster than they matter: a newer one replaces an
older one still waiting in the queue (``can_replace``), so a slow frame never builds a
backlog. The end of a run is never replaced. Views say what the user asked for (start,
compare, stop) and the app, which owns the run and the comparison (jobs.py), decides.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.message import Message

if TYPE_CHECKING:  # the engine modules behind a run load when a run starts, not with the app
    from collections.abc import Callable, Mapping
    from pathlib import Path

    from mgpu_tui.engine.compare.comparison import Comparison, Row
    from mgpu_tui.engine.launch.spec import LaunchSpec, ResolvedSpec
    from mgpu_tui.engine.machine.telemetry import Snapshot
    from mgpu_tui.engine.machine.topology import Topology
    from mgpu_tui.engine.nodes.view import NodeView
    from mgpu_tui.engine.records.follow import FollowedRun
    from mgpu_tui.engine.records.history import RunRecord
    from mgpu_tui.engine.records.telemetry_read import NodeMachine, TelemetrySeries
    from mgpu_tui.engine.run.causes.watchdog import Stall
    from mgpu_tui.engine.run.figures.aggregate import RunStats
    from mgpu_tui.engine.run.summary import RunSummary


class News(Message, bubble=False):
    """What a worker read or did, posted to the app, which posts it on to each view: it stops there
    (bubbling back up, it would reach the app again)."""

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**{"bubble": False, **kwargs})  # Textual's default is True again


class LatestOnly(News):
    """A state update: one still waiting in the queue is replaced by a newer one of its kind."""

    def can_replace(self, message: Message) -> bool:
        return type(message) is type(self)


class TelemetryUpdated(LatestOnly):
    def __init__(self, snapshot: Snapshot, recorded: bool = False) -> None:
        super().__init__()
        self.snapshot = snapshot
        self.recorded = recorded  # given to the app, not read live: each is shown, in order

    def can_replace(self, message: Message) -> bool:
        return not self.recorded and super().can_replace(message)


class TopologyRead(News):
    """The interconnect, read once from NVML (None, with the reason, where there is none)."""

    def __init__(self, topology: Topology | None, reason: str) -> None:
        super().__init__()
        self.topology = topology
        self.reason = reason


class RunStarted(News):
    """The app's own run started: its settings as resolved, its folder, a note on the settings."""

    def __init__(self, spec: LaunchSpec, resolved: ResolvedSpec, path: str, note: str | None) -> None:
        super().__init__()
        self.spec, self.resolved, self.path, self.note = spec, resolved, path, note


class RunOpened(News):
    """A run from its folder: a finished one replayed, a live one followed (never owned)."""

    def __init__(self, run: FollowedRun) -> None:
        super().__init__()
        self.run = run


class RunUpdated(LatestOnly):
    def __init__(
        self,
        drain: Callable[[], tuple[list[tuple[int, str, str]], int]],
        stats: RunStats,
        series: tuple[list[int], list[float], list[float | None]],
        stall_after: float,
        telemetry: TelemetrySeries | None = None,
        whole: tuple[list[int], list[float], list[float | None]] | None = None,
        nodes: tuple[NodeView, ...] = (),
        stalled: frozenset[int] | None = None,
        machines: Mapping[int, NodeMachine] | None = None,
        stall: Stall | None = None,
        stopped_rank: int | None = None,
    ) -> None:
        super().__init__()
        self.stall = stall  # the stall found, with its verdict (a hang: who never entered what, where)
        self.stopped_rank = stopped_rank  # the rank the user stopped (x), from the moment its signal went
        self.drain = drain  # the log lines so far, taken when shown (a newer update replaces this one)
        self.stats = stats
        self.machines = machines or {}  # several nodes, followed: each node's host (records/follow.py)
        # A script's run: the ranks of the stall found (its other quiet ranks are only silent);
        # None: the run's silence is a stall (a mode's).
        self.stalled = stalled
        self.nodes = nodes  # several nodes: each node as this one hears it (engine/nodes/watch.py)
        self.series = series  # the latest steps
        self.whole = whole  # the whole run, thinned
        self.stall_after = stall_after  # the run's stall timeout now
        self.telemetry = telemetry  # a followed run's recorded telemetry so far (a copy)


class OpenRequested(Message):
    """Show a run from its folder (the Runs view's Enter)."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path


class ComparisonRequested(Message):
    """Show a past comparison again, from the runs that were its rows (the Runs view's m)."""

    def __init__(self, comparison: str, paths: list[Path]) -> None:
        super().__init__()
        self.comparison = comparison
        self.paths = paths


class ComparisonRead(Message):
    """A past comparison read back from its runs by a worker (engine/compare/records.py), or why not."""

    def __init__(self, comparison: Comparison | None, error: str | None = None) -> None:
        super().__init__()
        self.comparison = comparison
        self.error = error


class RunsListed(Message):
    """The past runs of the run folder, read by a worker (engine/records/history.py)."""

    def __init__(self, records: list[RunRecord], root: Path) -> None:
        super().__init__()
        self.records = records
        self.root = root


class RunEnded(News):
    """The run ended; ``summary`` is None for a followed run that was cut off without one."""

    def __init__(
        self,
        summary: RunSummary | None,
        stats: RunStats,
        drain: Callable[[], tuple[list[tuple[int, str, str]], int]],
    ) -> None:
        super().__init__()
        self.summary = summary
        self.stats = stats  # its figures at the end, taken by the thread that owned it
        self.drain = drain  # its last log lines


class CompareStarted(News):
    """The app's comparison started (its modes checked): the plan of its runs."""

    def __init__(self, comparison: Comparison) -> None:
        super().__init__()
        self.comparison = comparison


class CompareUpdated(LatestOnly):
    """The rows so far, and (mode, step, steps) of each run going."""

    def __init__(self, rows: list[Row], progress: list[tuple[str, int, int]]) -> None:
        super().__init__()
        self.rows = rows
        self.progress = progress


class CompareEnded(News):
    def __init__(self, comparison: Comparison) -> None:
        super().__init__()
        self.comparison = comparison


# ---- what the user asked for, from a view -----------------------------------------------


class StartRequested(Message):
    """The run form's Start: run this spec."""

    def __init__(self, spec: LaunchSpec) -> None:
        super().__init__()
        self.spec = spec


class CompareRequested(Message):
    """The Compare view's Compare: run these modes from this template, one after another."""

    def __init__(self, modes: list[str], template: LaunchSpec) -> None:
        super().__init__()
        self.modes = modes
        self.template = template


class StopRequested(Message):
    """A view's Stop: stop the run or the comparison going, every rank of it."""
