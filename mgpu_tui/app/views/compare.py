"""The Compare view: choose modes, run them one after another, see the table and charts side by side.

It only draws what the app hands it (CompareUpdated / CompareEnded); the CompareController owns
the runs. The table and the charts are the ones ``mgpu-tui compare`` prints, so the app and the CLI
show the same numbers. Before anything runs, the table is the plan (compare_plan.py); the form is
compare_form.py."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.widgets import Button, DataTable, Input, ProgressBar, Select, SelectionList, Static

from mgpu_tui.app.messages import (
    CompareEnded,
    CompareRequested,
    CompareStarted,
    CompareUpdated,
    ComparisonRead,
    StopRequested,
    TelemetryUpdated,
)
from mgpu_tui.app.views.compare_form import DEFAULT_MODES, CompareForm
from mgpu_tui.app.views.compare_plan import plan_caption, plan_table, planned
from mgpu_tui.app.views.switcher import View
from mgpu_tui.app.widgets.mode_guide import demo_code, explanation
from mgpu_tui.app.widgets.text_panel import TextPanel
from mgpu_tui.console import plain
from mgpu_tui.engine.compare.comparison import CompareSettings, Comparison, Row, RunsSettings
from mgpu_tui.engine.launch.options import RUN_ROOT
from mgpu_tui.engine.launch.spec import LaunchSpec
from mgpu_tui.engine.machine.host import Host
from mgpu_tui.engine.planning.memory import ModePlan
from mgpu_tui.engine.planning.modes import MODES
from mgpu_tui.engine.run.summary import RunStatus
from mgpu_tui.errors import UsageError
from mgpu_tui.reports import compare as compare_output
from mgpu_tui.reports import compare_charts

if TYPE_CHECKING:
    from mgpu_tui.engine.machine.telemetry import Snapshot

FOLD_BELOW_ROWS = 40  # a terminal shorter than this shows results with the form folded


def fill_table(table: DataTable, headers: list[str], rows: list[list]) -> None:
    """``table`` cleared and filled, the plan's or the results'. Widths given, not measured:
    DataTable measures auto-width columns when idle, so a busy machine drew the columns at their
    headers' widths, or at the previous table's, until then."""
    table.clear(columns=True)
    for i, header in enumerate(headers):
        table.add_column(header, width=max(len(header), *(len(str(row[i])) for row in rows), 0))
    for row in rows:
        table.add_row(*row)


class CompareView(View):
    BINDINGS = [
        Binding("v", "toggle_guide", "Guide", show=False),
        Binding("f", "toggle_form", "Form", show=False),
    ]
    DEFAULT_CSS = """
    #compare-notes {
        padding: 0 1;
    }
    #compare-results {
        height: 1fr;
    }
    #compare-table {
        height: auto;
        max-height: 100%;
    }
    #compare-charts-box {
        height: auto;
        padding: 1 1 0 1;
    }
    #compare-guide {
        margin-top: 1;
    }
    """

    def __init__(self, host: Host, run_root: Path = RUN_ROOT, **kwargs) -> None:
        super().__init__(**kwargs)
        self.host = host
        self.run_root = run_root  # where the compared runs go
        self.modes: list[str] = []
        self.steps = 0
        self.total = 0
        self.running = False
        self.gpu_mem: int | None = None  # the smallest GPU's memory, from the telemetry
        self.host_mem: int | None = None
        self.shown: Comparison | None = None  # the comparison whose results are on screen
        self.results_first = False  # results are shown: on a short terminal the form folds
        self._explained: tuple[str, bool] | None = None  # the mode the guide explains, and if it runs

    def compose(self) -> ComposeResult:
        yield CompareForm(self.host, self.run_root, id="compare-form")
        # The table, then the charts under it, each as tall as it needs and as wide as the view: side
        # by side the table was cut after five columns at 80x24 and left rows empty at 160x50. At
        # 80x24 the results scroll (the mouse, or Tab to them and the arrows).
        with VerticalScroll(id="compare-results"):
            yield DataTable(id="compare-table", cursor_type="none")
            yield Static("", id="compare-notes")  # the CLI's notes: the marks, a busy machine, failures
            with Vertical(id="compare-charts-box"):
                yield Static("", id="compare-charts")
                yield Static("", id="compare-guide")  # the highlighted mode, explained
                yield Static("", id="compare-code")  # and its demo's source (v hides or shows it)

    def on_mount(self) -> None:
        self.query_one("#compare-notes", Static).display = False  # until a comparison has results
        self._explain(DEFAULT_MODES[0])
        self.show_plan()

    # ---- the plan, before anything runs ---------------------------------------------------------

    def on_telemetry_updated(self, message: TelemetryUpdated) -> None:
        self.machine_memory(message.snapshot)

    def machine_memory(self, snapshot: Snapshot) -> None:
        """The memory the plan is checked against, from the app's telemetry."""
        gpus = [g.readings.memory_total for g in snapshot.gpus if g.readings and g.readings.memory_total]
        memory = (min(gpus) if gpus else None, snapshot.host.memory_total)
        if memory != (self.gpu_mem, self.host_mem):
            self.gpu_mem, self.host_mem = memory
            self.show_plan()

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id != "compare-steps":  # the steps change no memory: results stay in view
            self.show_plan()

    def on_select_changed(self, event: Select.Changed) -> None:
        self.show_plan()

    def on_checkbox_changed(self, event) -> None:
        self.show_plan()

    def plans(self) -> tuple[LaunchSpec, list[ModePlan], bool, str] | None:
        """The form's spec; each mode's plan for it, marked against this machine's memory; whether
        the ranks share that memory (CPU ranks); what it is. None while the form is incomplete."""
        try:
            template = self.form.template()
        except (UsageError, ValueError):
            return None
        return planned(template, self.host, self.gpu_mem, self.host_mem)

    def show_plan(self) -> None:
        """The planner's table and verdicts, unless a comparison runs or its results are shown."""
        if self.running or not self.is_mounted:
            return
        found = self.plans()
        if found is None:
            return
        template, plans, shared, what = found
        self.shown = None  # the plan takes the results' place
        headers, rows = plan_table(template, plans, shared)
        self.form.grey_out(plans, shared)
        fill_table(self.query_one("#compare-table", DataTable), headers, rows)
        self.query_one("#compare-charts", Static).update(plan_caption(what))

    def _fold(self, results_first: bool) -> None:
        """Results first (a comparison started, or a past one shown): on a short terminal the form
        folds to its buttons and status, so the table and charts have the rows (f unfolds it)."""
        self.results_first = results_first
        self.set_class(results_first and self.app.size.height < FOLD_BELOW_ROWS, "folded")

    def action_toggle_form(self) -> None:
        """f: the settings again (or folded away again, for the results)."""
        self._fold(not self.results_first)

    def on_resize(self) -> None:
        self.set_class(self.size.width < 120, "narrow")
        short = self.app.size.height < FOLD_BELOW_ROWS
        self.set_class(short, "short")
        self.form.fit(short)
        self._fold(self.results_first)  # a terminal made taller unfolds the form, shorter folds it
        self.call_after_refresh(self._draw_charts)  # once the box has its new width

    def on_selection_list_selection_highlighted(self, event: SelectionList.SelectionHighlighted) -> None:
        if not self.running:  # while a comparison runs, the guide is the running mode's
            self._explain(event.selection.value)

    def _explain(self, name: str, running: bool = False) -> None:
        """The guide under the results: ``name``'s explanation and demo source; ``running``: the
        mode a comparison runs now, said as such (the highlighted mode stayed there while ddp,
        pipeline and fsdp ran)."""
        if name in MODES and (name, running) != self._explained:
            self._explained = (name, running)
            mode = MODES[name]
            said = Text("Running now: ", style="bold green") if running else Text()
            said.append_text(explanation(mode, self.host).append("   v: its demo's code", style="dim"))
            self.query_one("#compare-guide", Static).update(said)
            self.query_one("#compare-code", Static).update(demo_code(mode))

    def action_toggle_guide(self) -> None:
        """v: the highlighted mode's demo source, under its explanation, or not."""
        code = self.query_one("#compare-code", Static)
        code.display = not code.display

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "compare-stop":
            event.stop()
            self.post_message(StopRequested())
        elif event.button.id == "compare-start":
            event.stop()
            self.compare()

    def on_compare_form_submitted(self, event: CompareForm.Submitted) -> None:
        event.stop()
        self.compare()

    def compare(self) -> None:
        """Compare, Enter in the form: the modes ticked, with its settings (or why not)."""
        try:
            modes, template = self.form.request()
        except UsageError as exc:
            self.app.notify(plain(str(exc)), title="Cannot compare", severity="error", markup=False)
            return
        self.post_message(CompareRequested(modes, template))

    # ---- the comparison's news (the app hands each message of its thread here) -----------------

    def on_compare_started(self, message: CompareStarted) -> None:
        self.started(message.comparison)

    def on_compare_updated(self, message: CompareUpdated) -> None:
        self.show(message.rows, message.progress)

    def on_compare_ended(self, message: CompareEnded) -> None:
        self.ended(message.comparison)

    def started(self, comparison: Comparison) -> None:
        settings = comparison.settings
        assert isinstance(settings, CompareSettings)  # the view starts compares only
        modes = self.modes = list(settings.modes)
        self.steps = settings.steps
        self.total = len(modes) * self.steps
        self.query_one("#compare-progress", ProgressBar).update(total=self.total, progress=0)
        self.query_one("#compare-status", TextPanel).update(f"comparing {', '.join(modes)}: starting…")
        self._set_busy(True)
        self._fold(True)
        self.add_class("compared")  # its progress shows from now on
        self.shown = None
        self.show_rows([])
        self.query_one("#compare-charts", Static).update("")
        self.query_one("#compare-notes", Static).display = False

    def show(self, rows: list[Row], progress: list[tuple[str, int, int]]) -> None:
        done_steps = len(rows) * self.steps  # a finished run counts whole, failed or not
        going = sum(step for _, step, _ in progress)
        self.query_one("#compare-progress", ProgressBar).update(progress=done_steps + going)
        if progress:
            mode, step, steps = progress[0]
            self.query_one("#compare-status", TextPanel).update(
                f"{len(rows) + 1} of {len(self.modes)}: {mode} step {step}/{steps}"
            )
            self._explain(mode, running=True)
        self.show_rows(rows)

    def show_rows(self, rows: list[Row]) -> None:
        headers, cells = compare_output.cells(rows, lambda t: Text(t + " *", style="bold green"), Text)
        for row_cells, row in zip(cells, rows):
            row_cells[1] = Text(row.status, style="green" if row.status is RunStatus.OK else "bold red")
        fill_table(self.query_one("#compare-table", DataTable), headers, cells)

    def ended(self, comparison: Comparison) -> None:
        self._set_busy(False)
        highlighted = self.form.highlighted()
        if highlighted is not None:  # the guide follows the list again
            self._explain(highlighted)
        self.show_rows(comparison.rows)
        self.query_one("#compare-progress", ProgressBar).update(progress=self.total)
        failed = [r for r in comparison.rows if r.status is not RunStatus.OK]
        verdict = "stopped" if comparison.interrupted else f"{len(comparison.rows)} run(s) done"
        if failed:
            verdict += "; " + "; ".join(
                f"{r.mode} {r.status}: {r.root_cause or 'no cause found'}" for r in failed
            )
        self.query_one("#compare-status", TextPanel).update(verdict + "   * best in its column")
        notes = compare_output.compare_notes(comparison) if comparison.rows else []
        said = Text()
        for line in notes:  # a busy machine's timings stand out: the stars above may be its doing
            said.append(plain(line) + "\n", style="bold yellow" if line.startswith("BUSY") else "dim")
        box = self.query_one("#compare-notes", Static)
        box.update(said)
        box.display = bool(notes)
        self.shown = comparison
        self._draw_charts()

    def _draw_charts(self) -> None:
        """The shown comparison's charts, as wide as the view (drawn again when it is resized)."""
        comparison = self.shown
        if comparison is None:
            return
        width = self.query_one("#compare-charts-box").content_region.width or None
        charts = compare_charts.compare_charts(comparison, width) if comparison.rows else ""
        self.query_one("#compare-charts", Static).update(Text(charts))  # text, not markup

    # ---- a past comparison, read back from its runs ---------------------------------------------

    def show_past(self, comparison: str, paths: list[Path]) -> None:
        """The Runs view's m (the app showed this view first): the comparison ``comparison``
        again, from the run folders that were its rows (read by a worker: each run's summary and
        events)."""
        if self.running:
            self.app.notify("A comparison is going; stop it first (s).", title="Cannot show it")
            return
        status = self.query_one("#compare-status", TextPanel)
        status.update(plain(f"reading comparison {comparison} back from its {len(paths)} run(s)…"))
        self.run_worker(lambda: self._read_past(comparison, paths), thread=True, exclusive=True, group="past")

    def _read_past(self, comparison: str, paths: list[Path]) -> None:
        from mgpu_tui.engine.compare.records import comparison_from_runs
        from mgpu_tui.engine.records.history import RecordError

        if not paths:
            self.post_message(ComparisonRead(None, f"no run of comparison {comparison} can be read."))
            return
        try:
            self.post_message(ComparisonRead(comparison_from_runs(paths)))
        except RecordError as exc:
            self.post_message(ComparisonRead(None, str(exc)))

    def on_comparison_read(self, message: ComparisonRead) -> None:
        status = self.query_one("#compare-status", TextPanel)
        if message.comparison is None:
            status.update(plain(message.error or "the comparison cannot be read back."))
            return
        past = message.comparison
        self._fold(True)
        self.form.tick([r.mode for r in past.rows])  # Compare runs it again (the old ticks stayed)
        self.ended(past)
        said = f"{len(past.rows)} run(s) read back from their folders   * best in its column"
        if isinstance(past.settings, RunsSettings) and past.settings.differences:
            said += "; they differ: " + "; ".join(past.settings.differences)
        status.update(plain(said))

    def _set_busy(self, active: bool) -> None:
        self.running = active
        self.form.set_busy(active)

    @property
    def form(self) -> CompareForm:
        return self.query_one(CompareForm)
