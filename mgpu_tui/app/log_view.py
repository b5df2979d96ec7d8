"""Every rank's log lines: merged and coloured by rank, or one rank, with a search.

Lines arrive in batches (about four a second); at most ``MAX_LINES_PER_BATCH`` of
each are drawn (the newest), as one Text, so a flood cannot freeze the screen. Every line is in the run
directory's log files whatever is drawn.
"""

from __future__ import annotations

import collections

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Input, RichLog, Select

RANK_COLOURS = ["cyan", "magenta", "green", "yellow", "blue", "red", "bright_cyan", "bright_magenta"]
KEPT = 5000
SHOWN = 2000
MAX_LINES_PER_BATCH = 100


class LogView(Vertical):
    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._lines: collections.deque[tuple[int, str, str]] = collections.deque(maxlen=KEPT)
        self._ranks = 0
        self._pending_dropped = 0
        self._unseen = 0  # lines that arrived while the view was hidden

    def compose(self) -> ComposeResult:
        with Horizontal(id="log-controls"):
            yield Select([("all ranks", -1)], value=-1, allow_blank=False, id="log-rank",
                         type_to_search=False)  # fmt: skip
            yield Input(placeholder="search the logs", id="log-search")
        yield RichLog(id="log", max_lines=SHOWN, wrap=False, markup=False)

    def reset(self, ranks: int) -> None:
        self._lines.clear()
        self._ranks = ranks
        options = [("all ranks", -1)] + [(f"rank {r}", r) for r in range(ranks)]
        self.query_one("#log-rank", Select).set_options(options)
        self.query_one("#log-rank", Select).value = -1
        self.query_one("#log", RichLog).clear()

    def _filter(self):
        """A predicate for the current rank filter and search, read from the widgets once."""
        wanted = self.query_one("#log-rank", Select).value
        search = self.query_one("#log-search", Input).value.lower()

        def matches(entry: tuple[int, str, str]) -> bool:
            rank, _, line = entry
            return (wanted == -1 or wanted == rank) and (not search or search in line.lower())

        return matches

    @staticmethod
    def _format(lines: list[tuple[int, str, str]]) -> Text:
        """Many lines as one Text: one render for the whole batch instead of one per line."""
        text = Text()
        for i, (rank, stream, line) in enumerate(lines):
            if i:
                text.append("\n")
            colour = RANK_COLOURS[rank % len(RANK_COLOURS)]
            text.append(f"rank {rank} ", style=f"bold {colour}")
            text.append(line, style="red" if stream == "stderr" else "")
        return text

    def add(self, lines: list[tuple[int, str, str]], dropped: int = 0) -> None:
        self._lines.extend(lines)
        if not self.is_on_screen:
            # Drawn when the view shows again: a hidden log costs nothing.
            self._unseen += len(lines)
            self._pending_dropped += dropped
            return
        self._draw(lines, dropped)

    def _draw(self, lines: list[tuple[int, str, str]], dropped: int) -> None:
        log = self.query_one("#log", RichLog)
        shown = list(filter(self._filter(), lines))
        skipped = dropped + max(0, len(shown) - MAX_LINES_PER_BATCH)
        if skipped:
            note = f"… {skipped} lines not drawn here (every line is in the run's log files)"
            log.write(Text(note, style="dim"))
        if shown:
            log.write(self._format(shown[-MAX_LINES_PER_BATCH:]))

    def refilter(self) -> None:
        log = self.query_one("#log", RichLog)
        log.clear()
        shown = list(filter(self._filter(), self._lines))[-SHOWN:]
        if shown:
            log.write(self._format(shown))

    def on_show(self) -> None:
        unseen = list(self._lines)[-self._unseen:] if self._unseen else []
        dropped = self._pending_dropped + max(0, self._unseen - len(unseen))
        self._unseen = self._pending_dropped = 0
        if unseen or dropped:
            self._draw(unseen, dropped)

    def on_select_changed(self, event: Select.Changed) -> None:
        if event.select.id == "log-rank":
            self.refilter()

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "log-search":
            self.refilter()
