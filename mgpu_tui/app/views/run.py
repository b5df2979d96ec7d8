"""The Run view: start a mode and watch every rank: state, step, samples/s, loss, memory, logs.

It only draws what the app hands it (RunUpdated / RunEnded); the RunController owns the run.
A run opened from its folder (``mgpu-tui open``, the Runs view) shows the same way, with the
machine's telemetry over the whole run under its charts.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import TYPE_CHECKING

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widget import Widget
from textual.widgets import Select, Static

from mgpu_tui.app.messages import RunEnded, RunOpened, RunStarted, RunUpdated
from mgpu_tui.app.views.run_form import NARROW, RunForm, chosen
from mgpu_tui.app.widgets.chart import Chart
from mgpu_tui.app.widgets.log_view import LogView
from mgpu_tui.app.widgets.mode_guide import ModeGuide
from mgpu_tui.app.widgets.status_line import StatusLine
from mgpu_tui.app.widgets.telemetry_charts import TelemetryCharts
from mgpu_tui.app.widgets.text_panel import TextPanel
from mgpu_tui.console import fmt_bytes, fmt_loss, fmt_rate, fmt_seconds, plain
from mgpu_tui.engine.launch.options import RUN_ROOT
from mgpu_tui.engine.machine.host import Host
from mgpu_tui.engine.nodes.watch import NodeView
from mgpu_tui.engine.planning.modes import MODES
from mgpu_tui.engine.protocol.heartbeat import NodeState
from mgpu_tui.engine.protocol.typed import Word
from mgpu_tui.engine.run.aggregate import RankStats, RunStats
from mgpu_tui.engine.run.summary import RunStatus
from mgpu_tui.engine.run.watchdog import DEFAULT_MIN_S
from mgpu_tui.reports.memory import memory_lines

if TYPE_CHECKING:
    from collections.abc import Mapping

    from mgpu_tui.engine.launch.spec import LaunchSpec, ResolvedSpec
    from mgpu_tui.engine.records.follow import FollowedRun, NodeMachine, TelemetrySeries
    from mgpu_tui.engine.run.summary import RunSummary


class RankState(Word):
    """A rank as the Run view's table says it (docs/run-view.md: "States")."""

    STARTING = "starting"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    STALLED = "stalled"
    SILENT = "silent"  # a script's rank past the stall timeout, with no evidence it hangs
    STOPPED = "stopped"
    SLOW = "slow"  # a straggler: the others wait for it at every collective
    LOST = "lost"
    MISSING = "missing"


STATE_STYLE = {
    RankState.STARTING: "dim",
    RankState.RUNNING: "green",
    RankState.DONE: "bold green",
    RankState.FAILED: "bold red",
    RankState.STALLED: "bold yellow",
    RankState.SILENT: "yellow",
    RankState.STOPPED: "yellow",
    RankState.SLOW: "bold magenta",
    RankState.LOST: "bold red",
    RankState.MISSING: "bold yellow",
}
# A rank of another node, by what its node last said (engine/nodes/watch.py's states).
NODE_RANK_STATE = {
    NodeState.JOINING: RankState.STARTING,
    NodeState.RUNNING: RankState.RUNNING,
    NodeState.OK: RankState.DONE,
    NodeState.FAILED: RankState.FAILED,
    NodeState.INTERRUPTED: RankState.STOPPED,
    NodeState.LOST: RankState.LOST,
    NodeState.MISSING: RankState.MISSING,
}
WHOLE = "whole run"  # what the charts say while they show it (w: the latest steps)
TELEMETRY_MIN_HEIGHT = 32  # a shorter terminal shows no telemetry charts under the run's own
RANK_COLUMNS = (("rank", 7), ("state", 8), ("step", 7), ("samples/s", 10), ("loss", 8), ("peak memory", 11))


def rank_table(rows: list[tuple[str, ...]]) -> Text:
    """The per-rank rows under a bold header; text columns left, numbers right. A row of one cell
    heads a node's ranks (a job over several nodes)."""
    text = Text()
    for i, (name, width) in enumerate(RANK_COLUMNS):
        text.append((name.ljust(width) if i < 2 else name.rjust(width)) + " ", style="bold")
    for cells in rows:
        text.append("\n")
        if len(cells) == 1:
            text.append(cells[0], style="bold cyan")
            continue
        for i, (cell, (_, width)) in enumerate(zip(cells, RANK_COLUMNS)):
            style = STATE_STYLE[RankState(cell)] if i == 1 else ""
            text.append((cell.ljust(width) if i < 2 else cell.rjust(width)) + " ", style=style)
    return text


def rank_state(
    rank: RankStats | None,
    now: float,
    stall_after: float,
    failed_rank: int | None,
    finished: bool,
    ok: bool = False,
    number: int | None = None,
    stalled: frozenset[int] | None = None,
) -> RankState:
    """STARTING, RUNNING, DONE, FAILED, STALLED (no event for ``stall_after`` s), SILENT, STOPPED.

    ``ok``: the run ended ok, so a rank that reported nothing (a script without the
    reporter) is done, not stopped. ``number``: the rank's number, when it reported nothing.
    ``stalled``: a script's run (whose silence is a stall only on evidence: watchdog.py), the ranks
    of the stall found; its other quiet ranks are silent. None: silence is a stall (a mode's run).
    """
    moving = rank is not None and rank.where is not None  # a script's rank that beats: it runs
    if rank is None or (rank.last_step == 0 and not rank.done and not moving):
        if failed_rank is not None and (rank.rank if rank is not None else number) == failed_rank:
            return RankState.FAILED  # a script without the reporter says nothing, but torchrun named it
        if finished:
            return RankState.DONE if ok else RankState.STOPPED
        return RankState.STARTING
    if rank.error or rank.rank == failed_rank:
        return RankState.FAILED
    if rank.done or (finished and ok):
        return RankState.DONE
    if finished:
        return RankState.STOPPED
    if rank.last_event_t is not None and now - rank.last_event_t > stall_after:
        return RankState.STALLED if stalled is None or rank.rank in stalled else RankState.SILENT
    return RankState.RUNNING


def node_heading(node: NodeView, machine: NodeMachine | None = None) -> str:
    """The row over a node's ranks: which node, on which host, how it is as heard from here, and
    (a job followed from its folder) its host's CPU, memory and GPUs as its telemetry last said."""
    heading = f"node {node.node} · {node.host or 'not heard from'} · ranks {node.ranks}"
    if machine is not None:
        cpu = "n/a" if machine.cpu_percent is None else f"{machine.cpu_percent:.0f}%"
        heading += f" · CPU {cpu} · mem {fmt_bytes(machine.mem_used_bytes)}"
        if machine.gpu_util_percent is not None:
            heading += f" · GPUs {machine.gpu_util_percent:.0f}%"
    if node.here:
        heading += " · this node"
    if node.state in (NodeState.LOST, NodeState.MISSING, NodeState.FAILED, NodeState.INTERRUPTED):
        heading += f" · {node.state}"
    if node.state is NodeState.LOST and node.silent_s is not None:
        heading += f" {node.silent_s:.0f} s"
    return plain(heading)  # another machine's words: text only


def of_steps(requested: int | None) -> str:
    """The total after a step count ("/300"), or nothing for a script, which says none."""
    return "" if requested is None else f"/{requested:,}"


def result_panel(summary: RunSummary) -> Text:
    """A finished run's figures in two lines, and where its files are."""
    peaks = [p for p in summary.peak_mem_bytes if p is not None]
    # On the CPU the rank's resident set: the runtime besides its tensors (the memory line).
    peak = "process peak" if summary.device == "cpu" else "peak"
    figures = [
        f"{summary.steps:,}{of_steps(summary.steps_requested)} steps in {fmt_seconds(summary.duration_s)}",
        f"{fmt_rate(summary.samples_per_s)} samples/s",
        f"step {fmt_seconds(summary.step_time_s_median)}",
        f"loss {fmt_loss(summary.final_loss)}",
        f"{peak} {fmt_bytes(max(peaks)) if peaks else 'n/a'} a rank",
    ]
    memory = memory_lines(summary)  # the tensors' peak beside the plan's, where the run had a plan
    if summary.verify is not None:
        figures.append(f"verify {summary.verify.describe()}")
    energy = [g.energy_j for g in summary.telemetry.gpus] if summary.telemetry else []
    known = [e for e in energy if e is not None]
    if energy and len(known) == len(energy):
        figures.append(f"GPU energy {sum(known):,.0f} J")
    title = {RunStatus.OK: "Finished", RunStatus.INTERRUPTED: "Stopped", RunStatus.FAILED: "Failed"}[
        summary.status
    ]
    slow = "".join(f"\nStraggler: {s.describe()}." for s in summary.stragglers)
    job = f"\n{summary.slurm.describe(summary.stopped_by)}." if summary.slurm else ""
    return Text.assemble(  # verify's error and a straggler's words come from the run's files
        (f"{title}: ", "bold"),
        plain(" · ".join(figures)),
        (plain(slow), "magenta"),
        plain(job),
        *(part for line in memory for part in ("\n", plain(line[0].upper() + line[1:]))),
        "\n",
        ("Run directory: ", "bold"),
        plain(summary.run_dir),
    )


class RunView(Widget):
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
        self.rank_rows: list[tuple[str, ...]] = []  # the rows last drawn, as text
        self.label = ""  # "ddp on 2 ranks"
        self.hint = "(s stops it)"  # what the keys do to this run
        self._noted: str | None = None  # the note shown while the run goes
        self.stall_after = DEFAULT_MIN_S  # until the run says what its stall timeout is
        self._series: tuple = ([], [], [])  # the latest steps, for the charts' recent view
        self._whole: tuple = ([], [], [])  # the whole run, thinned

    def compose(self) -> ComposeResult:
        yield RunForm(self.host, self.run_root, id="run-form")
        yield StatusLine("No run yet: choose a mode and press Start.", id="run-status")
        with Horizontal(id="run-middle"):
            yield TextPanel(rank_table([]), id="ranks")
            with Vertical(id="charts"):
                yield Chart("throughput (samples/s)", fmt_rate, whole=WHOLE, smoothed=True, id="throughput")
                yield Chart("loss (global batch)", fmt_loss, whole=WHOLE, smoothed=True, id="loss")
        yield TelemetryCharts(id="telemetry")
        yield Static("", id="root-cause")
        # Before a run: the chosen mode explained, with its demo's source. During one: the logs
        # (v brings the guide back, to read the code while it runs).
        yield ModeGuide(self.host, id="guide")
        yield LogView(id="logs")

    def on_resize(self) -> None:
        self.set_class(self.size.width < NARROW, "narrow")

    def on_mount(self) -> None:
        self.query_one(LogView).display = False
        self.query_one("#run-middle").display = False  # no run yet: the guide gets the room
        self.query_one(ModeGuide).show(MODES[chosen(self.form.query_one("#mode", Select))])

    def on_show(self) -> None:
        # Ready for the form: the mode first, Tab to the model and the fields, Enter starts.
        if self.form.display:
            self.form.query_one("#mode").focus()

    def on_select_changed(self, event) -> None:
        if event.select.id == "mode" and event.value in MODES:
            self.query_one(ModeGuide).show(MODES[event.value])
            self.show_guide(True)

    def show_guide(self, shown: bool | None = None) -> None:
        """Show the mode's guide in place of the logs (None: the other one of the two)."""
        guide = self.query_one(ModeGuide)
        shown = not guide.display if shown is None else shown
        guide.display = shown
        self.query_one(LogView).display = not shown

    # ---- keys (the app's bindings name the action; the view shown carries it out) ----------

    def action_search_logs(self) -> None:
        """/: the logs shown (not the guide), the cursor in their search."""
        self.show_guide(False)
        self.query_one(LogView).focus_search()

    def action_toggle_guide(self) -> None:
        """v: the chosen mode's guide and demo source, or the logs."""
        self.show_guide()

    def action_next_gpu(self) -> None:
        """g: the telemetry charts' next GPU."""
        self.query_one(TelemetryCharts).next_gpu()

    def action_toggle_whole(self) -> None:
        """w: the charts show the whole run, or the latest steps that fit."""
        for chart_id in ("#throughput", "#loss"):
            chart = self.query_one(chart_id, Chart)
            chart.whole = None if chart.whole else WHOLE
        self._draw_charts()

    # ---- the run's news (the app hands each message of the run's thread here) -----------

    def on_run_started(self, message: RunStarted) -> None:
        self.started(message.spec, message.resolved, message.path, note=message.note)

    def on_run_opened(self, message: RunOpened) -> None:
        self.opened(message.run)

    def on_run_updated(self, message: RunUpdated) -> None:
        m = message
        self.show(m.stats, m.series, m.stall_after, m.whole, m.nodes, m.stalled, m.machines)
        if m.telemetry is not None:
            self.show_telemetry(m.telemetry)
        self.add_log_lines(*m.drain())

    def on_run_ended(self, message: RunEnded) -> None:
        self.add_log_lines(*message.drain())
        self.ended(message.summary, message.stats)

    @property
    def form(self) -> RunForm:
        return self.query_one(RunForm)

    def started(
        self, spec: LaunchSpec, resolved: ResolvedSpec, run_dir: str, note: str | None = None
    ) -> None:
        """A run began (from the form or from ``run --tui``); ``note`` says what its figures do not
        show (ranks sharing GPUs, say)."""
        self.form.fill(spec, resolved.nproc)
        mode = spec.script or spec.module or spec.mode
        label = f"{mode} on {resolved.world_size} rank{'s' if resolved.world_size != 1 else ''}"
        steps = None if spec.script or spec.module else spec.steps
        self._begin(label, resolved.world_size, steps, f"starting…  {run_dir}   (s stops it)", note)
        self.query_one(RunForm).running(True)

    def opened(self, run: FollowedRun) -> None:
        """A run from its folder: a finished one replayed, a live one followed."""
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
        self.stalled: frozenset[int] | None = None  # a script's run: the ranks of its stall (rank_state)
        self.nodes: tuple[NodeView, ...] = ()
        self.machines: Mapping[int, NodeMachine] = {}
        self.ended_ok = False
        self.label, self.hint = label, hint
        self._noted = None
        self.query_one("#run-status", StatusLine).update(plain(f"{label}: {status}"), done=0.0)
        panel = self.query_one("#root-cause", Static)  # until a failure needs it, the run's note
        panel.update(Text(f"Note: {note}", style="yellow") if note else "")
        panel.set_class(bool(note), "note")
        panel.set_class(False, "result")
        panel.display = bool(note)
        self.query_one(TelemetryCharts).display = False
        self.query_one("#run-middle").display = True
        self.query_one(LogView).reset(world_size)
        self.show_guide(False)
        self._fill_table(None)

    def _note(self, text: str) -> None:
        """A remark under the charts while the run goes (a straggler): the note panel, never an alarm."""
        panel = self.query_one("#root-cause", Static)
        if panel.has_class("result") or self.failed_rank is not None or text == self._noted:
            return  # (a Static's update lays the screen out again: only on a change)
        self._noted = text
        panel.update(Text(plain(text), style="yellow"))
        panel.set_class(True, "note")
        panel.display = True

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
    ) -> None:
        """The run's figures now; ``series``: the latest steps, ``whole``: the whole run (thinned);
        ``stall_after``: the engine's stall timeout (watchdog.py's rule); ``nodes``: several nodes,
        each as heard from here (its ranks are grouped under it); ``stalled``: rank_state's."""
        self.stall_after, self.stalled = stall_after, stalled
        self.nodes = nodes
        self.machines = machines or self.machines  # a node's last word stays once it has ended
        self._series, self._whole = series, whole or series
        status = (
            f"{self.label} {self.hint}   step {stats.steps:,}{of_steps(self.steps)}   "  # the key first:
            f"{fmt_rate(stats.samples_per_s)} samples/s   loss {fmt_loss(stats.final_loss)}"  # 80 columns cut
        )
        self.query_one("#run-status", StatusLine).update(status, done=self._done(stats.steps))
        self._draw_charts()
        self._fill_table(stats)
        if stats.stragglers and not self.finished:
            self._note(" ".join(f"Straggler: {s.describe()}." for s in stats.stragglers))

    def _done(self, steps: int) -> float | None:
        """The share of the run done, for the status line's bar; None (no bar) for a script."""
        return None if self.steps is None else steps / max(self.steps, 1)

    def _draw_charts(self) -> None:
        throughput, loss = self.query_one("#throughput", Chart), self.query_one("#loss", Chart)
        steps, rates, losses = self._whole if throughput.whole else self._series
        throughput.update(rates, steps)
        known = [(s, x) for s, x in zip(steps, losses) if x is not None]
        loss.update([x for _, x in known], [s for s, _ in known])

    def _fill_table(self, stats: RunStats | None) -> None:
        by_rank = {r.rank: r for r in stats.ranks} if stats else {}
        slow = {s.rank for s in stats.stragglers} if stats else set()
        now = time.time()
        rows: list[tuple[str, ...]] = []
        several = len(self.nodes) > 1
        groups: list[tuple[NodeView | None, range]] = [
            (node, range(node.first_rank, node.last_rank + 1)) for node in self.nodes if several
        ]
        for node, ranks in groups or [(None, range(self.world_size))]:
            if node is not None:
                rows.append((node_heading(node, self.machines.get(node.node)),))
            for rank in ranks:  # the job's ranks, by their own number
                r = by_rank.get(rank)
                if r is None and node is not None and not node.here:  # only its node's word for it
                    step = dict(node.steps).get(rank)
                    rows.append(
                        (
                            f"rank {rank}",
                            NODE_RANK_STATE[node.state],
                            "n/a" if step is None else str(step),
                            "n/a",
                            "n/a",
                            "n/a",
                        )
                    )
                    continue
                state = rank_state(
                    r,
                    now,
                    self.stall_after,
                    self.failed_rank,
                    self.finished,
                    self.ended_ok,
                    number=rank,
                    stalled=self.stalled,
                )
                if state is RankState.RUNNING and rank in slow:
                    state = RankState.SLOW
                if r is None:
                    rows.append((f"rank {rank}", state, "0", "n/a", "n/a", "n/a"))
                    continue
                rows.append(
                    (
                        f"rank {rank}",
                        state,
                        str(r.last_step),
                        fmt_rate(r.samples_per_s),
                        fmt_loss(r.loss),
                        fmt_bytes(r.mem_peak_bytes),
                    )
                )
        # Same number of rows: a repaint; a new run's rows: its height changes, so a new layout.
        relayout = len(rows) != len(self.rank_rows)
        self.rank_rows = rows
        self.query_one("#ranks", TextPanel).update(rank_table(rows), relayout=relayout)

    def ended(self, summary: RunSummary | None, stats: RunStats | None) -> None:
        """The run ended; no summary: a followed run cut off (its monitor died without one)."""
        self.finished = True
        if summary is None:
            steps = stats.steps if stats else 0
            self.query_one("#run-status", StatusLine).update(
                plain(
                    f"{self.label} cut off at step {steps:,}: nothing follows it and it has no summary "
                    "(its monitor was killed, or the machine restarted)"
                ),
                done=self._done(steps),
            )
            self.query_one(RunForm).running(False)
            self._fill_table(stats)
            return
        self.ended_ok = summary.status is RunStatus.OK
        if summary.nodes:  # each node as this one last heard it
            here = {n.node for n in self.nodes if n.here}  # a run opened from its folder has none
            self.nodes = tuple(dataclasses.replace(v, here=v.node in here) for v in summary.nodes)
        cause = summary.root_cause
        self.failed_rank = cause.rank if cause else None
        verdict = {RunStatus.OK: "finished ok", RunStatus.FAILED: "FAILED", RunStatus.INTERRUPTED: "stopped"}[
            summary.status
        ]
        if summary.verify is not None:
            verdict += f", verify {'ok' if summary.verify.ok else 'FAILED'}"
        self.query_one("#run-status", StatusLine).update(
            plain(
                f"{summary.mode} {verdict}: {summary.steps} steps, {fmt_rate(summary.samples_per_s)} "
                f"samples/s, loss {fmt_loss(summary.final_loss)}   {summary.run_dir}"
            ),
            done=self._done(summary.steps),
        )
        if cause:
            panel = self.query_one("#root-cause", Static)
            # A rank's own words: plain text, no escape reaches the terminal.
            hint = (
                [("What it means: ", "bold yellow"), (plain(f"{cause.hint}\n"), "yellow")]
                if cause.hint
                else []
            )
            panel.update(
                Text.assemble(
                    (plain(f"Root cause: {cause.headline()}\n"), "bold red"),
                    *hint,
                    plain(cause.traceback[-3000:]),
                )
            )
            panel.remove_class("note")
            panel.display = True
        else:  # what the run came to, kept on screen with where its files are
            panel = self.query_one("#root-cause", Static)
            panel.update(result_panel(summary))
            panel.set_class(False, "note")
            panel.set_class(True, "result")
            panel.display = True
        self.query_one(RunForm).running(False)
        self._fill_table(stats)
