"""Every rank's log lines: merged and coloured by rank, or one rank, with a search.

Lines arrive in batches (about four a second). The last ``KEPT`` are held here, so
the rank filter and the search can be changed at any time; the pane draws only the
rows on screen. Every line is in the run directory's log files whatever is drawn.
"""

from __future__ import annotations

import collections
import itertools
import os
from collections.abc import Sequence
from pathlib import Path

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Input, Select

from mgpu_tui.app.widgets.log_pane import Entry, LogPane, entry_text

KEPT = 5000
SHOWN = 2000
LEAST_ROWS = 5  # the lines a log box keeps however few it holds (a failing rank's traceback's end)


class LogView(Vertical):
    DEFAULT_CSS = """
    #log-controls {
        height: auto;
    }
    #log-rank {
        width: 20;
    }
    #log-search {
        width: 1fr;
    }
    #log {
        height: 1fr;
        border: round $primary-background;
    }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._lines: collections.deque[Entry] = collections.deque(maxlen=KEPT)
        self._unseen = 0  # lines that arrived while the view was hidden
        self._fitted = False  # the box as tall as its lines (a run that ended), else the room it has

    def compose(self) -> ComposeResult:
        with Horizontal(id="log-controls"):
            yield Select(
                [("all ranks", -1)], value=-1, allow_blank=False, id="log-rank", type_to_search=False
            )
            yield Input(placeholder="search the logs", id="log-search")
        yield LogPane(SHOWN, id="log")

    def reset(self, ranks: int) -> None:
        self._lines.clear()
        self._unseen = 0
        self.set_ranks(ranks)
        self.query_one("#log-search", Input).value = ""  # a new run's log starts unfiltered
        self.query_one(LogPane).clear()
        self.fit_to_lines(False)

    def set_ranks(self, ranks: int, nodes: Sequence[tuple[int, int, int]] = ()) -> None:
        """The rank filter's choices: every rank, one node's ranks (``nodes``: each node's number,
        first and last rank, for a job over several), or one of ``ranks`` (a command's grow as its
        processes join); the filter goes back to every rank, the lines stay."""
        options: list[tuple[str, int | tuple[int, int, int]]] = [("all ranks", -1)]
        options += [(f"node {n} (ranks {a}-{b})", (n, a, b)) for n, a, b in nodes]
        options += [(f"rank {r}", r) for r in range(ranks)]
        self.query_one("#log-rank", Select).set_options(options)
        self.query_one("#log-rank", Select).value = -1

    def fit_to_lines(self, fitted: bool) -> None:
        """``fitted`` (a run that ended: its lines are all there): the box as tall as its lines (at
        least LEAST_ROWS) and no taller: a log of 4 lines took 25 rows of a 160x45 screen whose charts
        had none, and the view gives the rest to what has content (view.py); past that, the box takes
        the rows it is given and scrolls. Not fitted (a run that goes): all the room it is given."""
        self._fitted = fitted
        self._fit(self.query_one(LogPane).virtual_size.height)

    def on_log_pane_grown(self, message: LogPane.Grown) -> None:
        self._fit(message.rows)

    def _fit(self, rows: int) -> None:
        if not self._fitted:
            self.styles.max_height = None
            return
        controls = self.query_one("#log-controls").outer_size.height or 1
        # The border, and a row for the sideways scrollbar a long line brings.
        self.styles.max_height = controls + max(rows, LEAST_ROWS) + 3

    def fold_controls(self, folded: bool) -> None:
        """The filter and the search on one row without borders (a short terminal: the rows go to
        the log's lines)."""
        self.query_one("#log-rank", Select).compact = folded
        self.query_one("#log-search", Input).compact = folded
        self.call_after_refresh(lambda: self._fit(self.query_one(LogPane).virtual_size.height))

    def toggle_wrap(self) -> bool:
        """Long lines wrap, or scroll sideways (W); whether they wrap now."""
        return self.query_one(LogPane).toggle_wrap()

    def save(self, folder: Path, name: str) -> Path:
        """The lines shown (the rank filter's and the search's), as text, into a new file
        ``folder/mgpu-tui-log-NAME[-N].txt``: never over an existing file, never through a link."""
        pane = self.query_one(LogPane)
        rank, value = self.rank_shown(), self.query_one("#log-rank", Select).value
        shown = f"node{value[0]}" if isinstance(value, tuple) else "all" if rank is None else f"rank{rank}"
        stem = f"mgpu-tui-log-{name}-{shown}"
        text = "".join(f"{entry_text(entry)}\n" for entry in pane.entries)
        for n in range(1, 1000):
            path = folder / (f"{stem}.txt" if n == 1 else f"{stem}-{n}.txt")
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
            except FileExistsError:
                continue
            with os.fdopen(fd, "w", encoding="utf-8", errors="replace") as f:
                f.write(text)
            return path
        raise FileExistsError(f"{folder / stem}.txt and 998 more exist already")

    def rank_shown(self) -> int | None:
        """The rank whose lines the filter shows; None: every rank, or a node's."""
        value = self.query_one("#log-rank", Select).value
        return value if isinstance(value, int) and value >= 0 else None

    def choose_rank(self) -> None:
        """The rank filter focused and open (`l` in the Run view): arrows and Enter choose."""
        select = self.query_one("#log-rank", Select)
        select.focus()
        select.expanded = True

    def focus_search(self) -> None:
        """Put the cursor in the search (`/` in the Run view): letters typed there stay there."""
        self.query_one("#log-search", Input).focus()

    def _filter(self):
        """A predicate for the current rank filter and search, read from the widgets once."""
        wanted = self.query_one("#log-rank", Select).value
        search = self.query_one("#log-search", Input).value.lower()

        def chosen(rank: int) -> bool:
            if isinstance(wanted, tuple):  # a node: its ranks
                return wanted[1] <= rank <= wanted[2]
            return wanted == -1 or wanted == rank

        def matches(entry: Entry) -> bool:
            rank, _, line = entry
            if rank is None:  # the app's own notes are always shown
                return True
            return chosen(rank) and (not search or search in line.lower())

        return matches

    def add(self, lines: Sequence[Entry], dropped: int = 0) -> None:
        """New lines; ``dropped``: lines before them the engine read but could not hold for us."""
        if dropped:
            note = f"… {dropped:,} lines not shown here (every line is in the run's log files)"
            lines = [(None, "note", note), *lines]
        self._lines.extend(lines)
        if not self.is_on_screen:
            self._unseen += len(lines)  # drawn when the view shows again: a hidden log costs nothing
            # A log just made visible is on screen only after the next refresh: look again then.
            self.call_after_refresh(self._draw_unseen)
            return
        self.query_one(LogPane).extend(filter(self._filter(), lines))

    def refilter(self) -> None:
        pane = self.query_one(LogPane)
        pane.clear()
        pane.extend(list(filter(self._filter(), self._lines))[-SHOWN:])

    def on_show(self) -> None:
        self.call_after_refresh(self._draw_unseen)  # on screen once the refresh placed it

    def _draw_unseen(self) -> None:
        if self._unseen and self.is_on_screen:
            unseen = list(itertools.islice(reversed(self._lines), min(self._unseen, KEPT)))[::-1]
            self._unseen = 0
            self.query_one(LogPane).extend(list(filter(self._filter(), unseen))[-SHOWN:])

    def on_select_changed(self, event: Select.Changed) -> None:
        if event.select.id == "log-rank":
            self.refilter()

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "log-search":
            self.refilter()
