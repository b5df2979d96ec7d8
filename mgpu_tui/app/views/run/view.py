"""The Run view: start a mode and watch every rank: state, step, samples/s, loss, memory, logs.

It only draws what the app hands it (RunStarted, RunUpdated, RunEnded: its on_ handlers); the
RunController owns the run. A run opened from its folder (``mgpu-tui open``, the Runs view) shows
the same way, with the machine's telemetry over the whole run. Its parts: the form (form.py), the
rank table (rank_table.py), the charts (charts.py), the outcome panel (outcome.py), and below them
the guide or the logs (logs_and_guide.py); what it says in text is text.py's."""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.widgets import Select

from mgpu_tui.app.messages import RunEnded, RunOpened, RunStarted, RunUpdated
from mgpu_tui.app.views.run.charts import RunCharts
from mgpu_tui.app.views.run.form import NARROW, RunForm, chosen
from mgpu_tui.app.views.run.logs_and_guide import LogsAndGuide
from mgpu_tui.app.views.run.outcome import RunOutcome
from mgpu_tui.app.views.run.rank_table import RankContext, RankTable, RankTableKeys
from mgpu_tui.app.views.run.text import cut_off_status, ended_status, running_status, waiting
from mgpu_tui.app.widgets.log_view import LogView
from mgpu_tui.app.widgets.mode_guide import ModeGuide
from mgpu_tui.app.widgets.status_line import StatusLine
from mgpu_tui.app.widgets.telemetry_charts import TelemetryCharts
from mgpu_tui.console import plain
from mgpu_tui.engine.launch.options import RUN_ROOT
from mgpu_tui.engine.machine.host import Host
from mgpu_tui.engine.nodes.view import NodeView
from mgpu_tui.engine.planning.modes import MODES
from mgpu_tui.engine.protocol.text import short_line
from mgpu_tui.engine.run.causes.watchdog import DEFAULT_MIN_S
from mgpu_tui.engine.run.figures.aggregate import RunStats
from mgpu_tui.engine.run.summary import RunStatus

if TYPE_CHECKING:
    from collections.abc import Mapping

    from mgpu_tui.engine.launch.spec import LaunchSpec, ResolvedSpec
    from mgpu_tui.engine.records.follow import FollowedRun
    from mgpu_tui.engine.records.telemetry_read import NodeMachine, TelemetrySeries
    from mgpu_tui.engine.run.causes.watchdog import Stall
    from mgpu_tui.engine.run.summary import RunSummary


TELEMETRY_MIN_HEIGHT = 32  # a shorter terminal shows no telemetry charts under the run's own
SHORT = 44  # rows of the view under which it folds for its logs (80x24 gives it 20; 160x50, 46)
TINY = 30  # rows under which the panel under the charts keeps 5 (80x24); a short one keeps 40%


class RunView(LogsAndGuide, RankTableKeys):
    BINDINGS = [
        Binding("g", "next_gpu", "Next GPU", show=False),
        Binding("v", "toggle_guide", "Guide", show=False),
        Binding("w", "toggle_whole", "Whole run", show=False),
        Binding("slash", "search_logs", "Search logs", show=False),
        Binding("l", "filter_logs", "Rank's logs", show=False),
        Binding("x", "stop_rank", "Stop that rank", show=False),
        Binding("o", "sort_ranks", "Sort ranks", show=False),
        Binding("n", "open_node", "Open next node", show=False),
        Binding("N", "close_node", "Close node", show=False),
        Binding("W", "wrap_logs", "Wrap logs", show=False),
        Binding("ctrl+s", "save_logs", "Save logs", show=False),
    ]
    DEFAULT_CSS = """
    RunView {
        height: 1fr;
    }
    #run-status {
        padding: 0 1;
    }
    #run-middle {
        height: auto;
        max-height: 14;
    }
    #ranks {
        width: auto;
        max-width: 75%;
        padding: 0 1;
        height: auto;
        max-height: 14;
    }
    #charts {
        width: 1fr;
        height: auto;
        padding: 0 1;
    }
    #charts Chart {
        height: 5;
    }
    /* Under 120 columns the charts go under the ranks, side by side, each half the width: beside the
       table they had 20 columns at 80x24, their titles cut. */
    RunView.narrow #run-middle {
        layout: vertical;
    }
    RunView.narrow #ranks {
        width: 1fr;
        max-width: 100%;
        max-height: 8;
    }
    RunView.narrow #charts {
        layout: horizontal;
        height: 5;
    }
    RunView.narrow #charts Chart {
        width: 1fr;
    }
    RunView.narrow #throughput {
        margin-right: 2;
    }
    #root-cause {
        display: none;
        height: auto;
        max-height: 16;
        border: heavy $error;
        padding: 0 1;
        overflow-y: auto;
    }
    /* Before any failure, the panel carries the run's note (ranks sharing GPUs): a remark, not an alarm. */
    #root-cause.note {
        border: round $warning;
    }
    #root-cause.result {
        border: round $success;
    }
    #logs {
        height: 1fr;
    }
    /* A short terminal (80x24): the log's controls fold to one row and, once the run has ended,
       the charts give their rows to the logs and the result panel keeps its first lines (it
       scrolls): at least 5 log lines stay readable, a failing rank's traceback among them. */
    RunView.short #root-cause {
        max-height: 40%;  /* 160x45: a root cause's 16 rows, the logs 10 or more (it had 5 over 25) */
    }
    RunView.tiny #root-cause {
        max-height: 5;
    }
    RunView.short.ended #charts {
        display: none;
    }
    """

    def __init__(self, host: Host, run_root: Path = RUN_ROOT, **kwargs) -> None:
        super().__init__(**kwargs)
        self.host = host
        self.run_root = run_root  # where a run of the form goes
        self.world_size = 0
        self.steps: int | None = 0
        self.failed_rank: int | None = None
        self.finished = False
        self.ended_ok = False
        self.stalled: frozenset[int] | None = None  # a script's run: the ranks of its stall (rank_state)
        self.stall: Stall | None = None  # the stall found (a hang's verdict), kept once the run ends
        self.stopped_rank: int | None = None  # the rank stopped with x: named from its signal on
        self.nodes: tuple[NodeView, ...] = ()
        self.machines: Mapping[int, NodeMachine] = {}
        self._log_nodes: tuple[tuple[int, int, int], ...] = ()  # the nodes the logs' filter offers
        self.label = ""  # "ddp on 2 ranks"
        self.hint = "(s stops it)"  # what the keys do to this run
        self.stall_after = DEFAULT_MIN_S  # until the run says what its stall timeout is
        self._begun = time.monotonic()  # when the run shown began (or was opened)
        self._nice = 0  # the priority its ranks run at (the app's own runs: UI_RANK_NICE)

    def compose(self) -> ComposeResult:
        yield RunForm(self.host, self.run_root, id="run-form")
        yield StatusLine("No run yet: choose a mode and press Start.", id="run-status")
        with Horizontal(id="run-middle"):
            yield RankTable(id="ranks")
            yield RunCharts(id="charts")
        yield TelemetryCharts(id="telemetry")
        yield RunOutcome(id="root-cause")
        # Before a run: the chosen mode explained, with its demo's source. During one: the logs
        # (v brings the guide back, to read the code while it runs).
        yield ModeGuide(self.host, id="guide")
        yield LogView(id="logs")

    def on_resize(self) -> None:
        self.set_class(self.size.width < NARROW, "narrow")
        short = self.size.height < SHORT
        self.set_class(short, "short")
        self.query_one(LogView).fold_controls(short)
        self.set_class(self.size.height < TINY, "tiny")

    def on_mount(self) -> None:
        self.query_one(LogView).display = False
        self.query_one("#run-middle").display = False  # no run yet: the guide gets the room
        self.query_one(ModeGuide).show(MODES[chosen(self.form.query_one("#mode", Select))])

    def on_show(self) -> None:
        # Ready for the form: the mode first, Tab to the model and the fields, Enter starts.
        if self.form.display:
            self.form.query_one("#mode").focus()

    def action_next_gpu(self) -> None:
        """g: the telemetry charts' next GPU."""
        self.query_one(TelemetryCharts).next_gpu()

    def action_toggle_whole(self) -> None:
        """w: the charts show the whole run, or the latest steps that fit."""
        charts = self.query_one(RunCharts)
        charts.whole = not charts.whole

    def on_run_started(self, message: RunStarted) -> None:  # the run's news: the app hands each here
        self.started(message.spec, message.resolved, message.path, note=message.note)

    def on_run_opened(self, message: RunOpened) -> None:
        self.opened(message.run)

    def on_run_updated(self, message: RunUpdated) -> None:
        m = message
        self.show(
            m.stats, m.series, m.stall_after, m.whole, m.nodes, m.stalled, m.machines, m.stall, m.stopped_rank
        )
        if m.telemetry is not None:
            self.show_telemetry(m.telemetry)
        self.add_log_lines(*m.drain())

    def on_run_ended(self, message: RunEnded) -> None:
        self.add_log_lines(*message.drain())
        self.ended(message.summary, message.stats)

    def started(
        self, spec: LaunchSpec, resolved: ResolvedSpec, run_dir: str, note: str | None = None
    ) -> None:
        """A run began (from the form or from ``run --tui``); ``note`` says what its figures do not
        show (ranks sharing GPUs, say)."""
        self.form.fill(spec, resolved.nproc)
        self._guide_for(spec)
        mode = short_line(spec.program, 60) if spec.program else spec.mode
        world = resolved.world_size
        ranks = "its own ranks" if world is None else f"{world} rank{'s' if world != 1 else ''}"
        steps = None if spec.program else spec.steps
        self._nice = spec.nice
        self.run_dir = run_dir
        self._begin(f"{mode} on {ranks}", world or 0, steps, f"starting…  {run_dir}   (s stops it)", note)
        self.query_one(RunForm).running(True)

    def opened(self, run: FollowedRun) -> None:
        """A run from its folder: a finished one replayed, a live one followed."""
        self._nice = 0  # not known: its ranks are another process's
        self.run_dir = str(run.path)
        how = (
            "started elsewhere, followed live (q leaves it running; s asks before stopping it)"
            if run.live_at_open
            else "opened from its record"
        )
        self._begin(
            run.label,
            run.world_size,
            run.steps_requested,
            f"{how}   {run.path}",
            None,
            hint="(followed: q leaves it running)",
        )
        again = run.launch_spec()
        if again is not None:  # Start runs it again, as it was
            self.form.fill(*again)
            self._guide_for(again[0])
        self.form.running(run.live_at_open)

    def _begin(
        self,
        label: str,
        world_size: int,
        steps: int | None,
        status: str,
        note: str | None,
        hint: str = "(s stops it)",
    ) -> None:
        """``steps``: the run's total; None for a script, which says none."""
        self.world_size, self.steps, self.failed_rank, self.finished = world_size, steps, None, False
        self.stalled, self.nodes, self.machines, self.stall, self.stopped_rank = None, (), {}, None, None
        self.ended_ok = False
        self._begun = time.monotonic()
        self.remove_class("ended")
        self.label, self.hint = label, hint
        self.query_one("#run-status", StatusLine).update(plain(f"{label}: {status}"), done=0.0)
        self.query_one(RunOutcome).begin(note)  # until a failure needs it, the run's note
        self.query_one(TelemetryCharts).display = False
        self.query_one("#run-middle").display = True
        self.query_one(LogView).reset(world_size)
        self._log_nodes = ()
        self.rank_table.reset()
        self.show_guide(False)
        self._draw_ranks(None)

    def show_telemetry(self, series: TelemetrySeries) -> None:
        charts = self.query_one(TelemetryCharts)
        charts.show(series)
        # On a short terminal the run's own rows, charts and logs come first.
        charts.display = charts.display and self.app.size.height >= TELEMETRY_MIN_HEIGHT

    def add_log_lines(self, lines: list[tuple[int, str, str]], dropped: int) -> None:
        if lines or dropped:
            self.query_one(LogView).add(lines, dropped)

    def show(
        self,
        stats: RunStats,
        series,
        stall_after: float,
        whole=None,
        nodes: tuple = (),
        stalled: frozenset[int] | None = None,
        machines: Mapping[int, NodeMachine] | None = None,
        stall: Stall | None = None,
        stopped_rank: int | None = None,
    ) -> None:
        """The run's figures now; ``series``: the latest steps, ``whole``: the whole run (thinned);
        ``stall_after``: the engine's stall timeout (watchdog.py's rule); ``nodes``: several nodes,
        each as heard from here (its ranks are grouped under it); ``stalled``: rank_state's;
        ``stall``: the stall found, its verdict said at once; ``stopped_rank``: the rank x stopped."""
        self.stall_after, self.stalled = stall_after, stalled
        self.stall = stall or self.stall
        self.stopped_rank = self.stopped_rank if stopped_rank is None else stopped_rank
        self.nodes = nodes
        grown = bool(stats.world_size and stats.world_size > self.world_size)
        if grown:  # a command's, learned as it joins
            self.world_size = stats.world_size or 0
        layout = tuple((n.node, n.first_rank, n.last_rank) for n in nodes) if len(nodes) > 1 else ()
        if grown or layout != self._log_nodes:  # the logs' filter offers each rank, and each node
            self._log_nodes = layout
            self.query_one(LogView).set_ranks(self.world_size, layout)
        self.machines = machines or self.machines  # a node's last word stays once it has ended
        status = running_status(f"{self.label} {self.hint}", stats, self.steps)
        if not stats.steps and not self.finished:  # no step yet: for how long, and what may slow it
            load = os.getloadavg()[0], os.cpu_count() or 1
            since = waiting(time.monotonic() - self._begun, self._nice, load)
            status = f"{self.label} {self.hint}   starting for {since}"
        self.query_one("#run-status", StatusLine).update(status, done=self._done(stats.steps))
        self.query_one(RunCharts).show(series, whole)
        self._draw_ranks(stats)
        if not self.finished:  # a hang's verdict, else the slow ranks' remark
            self.query_one(RunOutcome).during(stats, self.stall, failed=self.failed_rank is not None)

    def _done(self, steps: int) -> float | None:
        """The share of the run done, for the status line's bar; None (no bar) for a script."""
        return None if self.steps is None else steps / max(self.steps, 1)

    def rank_stopping(self, rank: int) -> None:
        """x, answered yes: the rank is the one that fails first, before its peers' errors come."""
        self.stopped_rank = rank
        self._draw_ranks(self.rank_table.shown)

    def _draw_ranks(self, stats: RunStats | None) -> None:
        """The rank table, from these figures and what the view knows of the run now."""
        failed = self.failed_rank if self.failed_rank is not None else self.stopped_rank
        hung = {r.rank: r.last_step for r in self.stall.ranks} if self.stall is not None else {}
        context = RankContext(
            self.world_size,
            self.nodes,
            self.machines,
            self.stall_after,
            failed,
            self.finished,
            self.ended_ok,
            self.stalled,
            hung,
        )
        self.rank_table.show(stats, context)

    def ended(self, summary: RunSummary | None, stats: RunStats | None) -> None:
        """The run ended; no summary: a followed run cut off (its monitor died without one)."""
        self.finished = True
        self.add_class("ended")
        if summary is None:
            steps = stats.steps if stats else 0
            self.query_one("#run-status", StatusLine).update(
                cut_off_status(self.label, steps), done=self._done(steps)
            )
            self.query_one(RunForm).running(False)
            self._draw_ranks(stats)
            return
        self.ended_ok = summary.status is RunStatus.OK
        if summary.nodes:  # each node as this one last heard it
            here = {n.node for n in self.nodes if n.here}  # a run opened from its folder has none
            self.nodes = tuple(dataclasses.replace(v, here=v.node in here) for v in summary.nodes)
        cause = summary.root_cause
        self.failed_rank = cause.rank if cause else None
        self.stall = summary.stall or self.stall
        self.query_one("#run-status", StatusLine).update(
            ended_status(summary), done=self._done(summary.steps)
        )
        if cause:
            self.query_one(RunOutcome).failure(summary, cause)
        else:
            self.query_one(RunOutcome).result(summary)
        self.query_one(RunForm).running(False)
        self._draw_ranks(stats)
