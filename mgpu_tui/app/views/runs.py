"""The Runs view: the past runs of the run folder, newest first; Enter opens one in the Run view.

The list is read by a worker thread (engine/records/history.py reads two small files a run)
each time the view shows and every few seconds while it does, so a run that ends in another
terminal changes its row here. A broken folder is a row that says why, never an error.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Static

from mgpu_tui.app.messages import ComparisonRequested, OpenRequested, RunsListed
from mgpu_tui.app.views.switcher import View
from mgpu_tui.console import fmt_loss, fmt_rate, fmt_seconds, plain, status_word
from mgpu_tui.engine.records.history import RecordStatus

REFRESH_S = 3.0
STATUS_STYLE = {
    "ok": "green",
    "failed": "bold red",
    "interrupted": "yellow",
    "running": "bold cyan",
    "cut off": "red",
    "unfinished": "dim",
    "broken": "dim red",
}
COLUMNS = (
    "started",
    "what",
    "ranks",
    "status",
    "duration",
    "samples/s",
    "loss",
    "comparison",
    "root cause or reason",
)


class RunsView(View):
    BINDINGS = [Binding("m", "open_comparison", "Its comparison")]
    DEFAULT_CSS = """
    RunsView {
        height: 1fr;
    }
    #runs-title {
        padding: 0 1;
        height: auto;
    }
    #runs-table {
        height: 1fr;
    }
    #runs-detail {
        height: auto;
        max-height: 4;
        padding: 0 1;
        color: $text-muted;
    }
    """

    def __init__(self, root: Path, **kwargs) -> None:
        super().__init__(**kwargs)
        self.root = root
        self.paths: list[str] = []  # the rows' run folders, in the table's order
        self.records: list = []  # the rows' records (engine/records/history.py RunRecord), in that order

    def compose(self) -> ComposeResult:
        yield Static(plain(f"Runs in {self.root}: reading…"), id="runs-title", markup=False)
        table: DataTable[str] = DataTable(id="runs-table", cursor_type="row", zebra_stripes=True)
        table.add_columns(*COLUMNS)
        yield table
        # The run under the cursor, its cause or reason whole: at 80 columns that column is off screen.
        yield Static("", id="runs-detail", markup=False)

    def on_mount(self) -> None:
        self.set_interval(REFRESH_S, self.reload)

    def on_show(self) -> None:
        self.reload()
        self.query_one(DataTable).focus()

    def reload(self) -> None:
        if self.display:
            self.run_worker(self._read, thread=True, exclusive=True, group="runs")

    def _read(self) -> None:
        from mgpu_tui.engine.records.history import list_runs

        self.post_message(RunsListed(list_runs(self.root), self.root))

    def on_runs_listed(self, message: RunsListed) -> None:
        self.show(message.records)

    def show(self, records) -> None:
        """The rows, newest first; the cursor stays on the run it was on."""
        table = self.query_one(DataTable)
        row = table.cursor_row
        current = self.paths[row] if 0 <= row < len(self.paths) else None
        table.clear()
        self.paths = [r.path for r in records]
        self.records = list(records)
        for record in records:
            table.add_row(*_cells(record), key=record.path)
        if current in self.paths:
            table.move_cursor(row=self.paths.index(current))
        self._show_detail(table.cursor_row)  # (a cause may have come since: the same row, read again)
        count = len(records)
        if count:
            title = (
                f"Runs in {self.root}: {count}, newest first. Enter opens one; a run still going "
                "is followed live, and keeps going when you leave. m shows a compared run's "
                "comparison again."
            )
        else:
            title = f"No runs in {self.root} yet: start one in the Run view (r), or with `mgpu-tui run`."
        self.query_one("#runs-title", Static).update(plain(title))

    def action_open_comparison(self) -> None:
        """m: the comparison the run under the cursor was a row of, in the Compare view, from its runs."""
        from mgpu_tui.engine.records.history import comparison_runs

        row = self.query_one(DataTable).cursor_row
        record = self.records[row] if 0 <= row < len(self.records) else None
        if record is None or not record.comparison:
            self.app.notify("This run was not part of a comparison.", title="No comparison")
            return
        paths = comparison_runs(self.records, record.comparison)
        self.post_message(ComparisonRequested(record.comparison, paths))

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        """Under the table: the highlighted run's folder and its root cause or reason, whole."""
        self._show_detail(event.cursor_row)

    def _show_detail(self, row: int) -> None:
        record = self.records[row] if 0 <= row < len(self.records) else None
        detail = self.query_one("#runs-detail", Static)
        detail.update(_detail(record) if record is not None else "")
        detail.display = record is not None

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        if event.row_key.value is not None:
            self.post_message(OpenRequested(Path(event.row_key.value)))


def _cause(record) -> str:
    return record.why or ""  # its root cause, the hang it was stopped in, or why it is broken


def _detail(record) -> str:
    """The run's folder, status and cause or reason, as plain text."""
    said = f"{Path(record.path).name} · {status_word(record.status)}"
    cause = _cause(record)
    return plain(f"{said}: {cause}" if cause else said, 600)


def _cells(record) -> tuple:
    """One run's row. Every text from a run folder is plain text (a DataTable reads a str as markup)."""
    s = record.summary
    when = record.created_at
    started = dt.datetime.fromtimestamp(when).strftime("%Y-%m-%d %H:%M") if when else "?"
    what = record.label if record.status is not RecordStatus.BROKEN else Path(record.path).name
    cause = _cause(record)
    figures = (
        (
            fmt_seconds(s.duration_s) if s.duration_s is not None else "",
            fmt_rate(s.samples_per_s),
            fmt_loss(s.final_loss),
        )
        if s
        else ("", "", "")
    )
    return (
        Text(started),
        Text(plain(what)[:40]),
        Text(str(record.world_size) if record.world_size else "?", justify="right"),
        Text(status_word(record.status), style=STATUS_STYLE.get(record.status, "")),
        *(Text(f, justify="right") for f in figures),
        Text(record.comparison or ""),  # a NAME (checked as read)
        Text(plain(cause)[:120]),
    )
