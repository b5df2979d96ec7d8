"""Every rank's log lines: merged and coloured by rank, or one rank, with a search.

Lines arrive in batches; at most ``MAX_LINES_PER_BATCH`` of each batch are drawn
(the newest), so a flood cannot freeze the screen. Every line is in the run
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
MAX_LINES_PER_BATCH = 400


class LogView(Vertical):
    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._lines: collections.deque[tuple[int, str, str]] = collections.deque(maxlen=KEPT)
        self._ranks = 0

    def compose(self) -> ComposeResult:
        with Horizontal(id="log-controls"):
            yield Select([("all ranks", -1)], value=-1, allow_blank=False, id="log-rank")
            yield Input(placeholder="search the logs", id="log-search")
        yield RichLog(id="log", max_lines=SHOWN, wrap=False, markup=False)

    def reset(self, ranks: int) -> None:
        self._lines.clear()
        self._ranks = ranks
        options = [("all ranks", -1)] + [(f"rank {r}", r) for r in range(ranks)]
        self.query_one("#log-rank", Select).set_options(options)
        self.query_one("#log-rank", Select).value = -1
        self.query_one("#log", RichLog).clear()

    def _matches(self, rank: int, line: str) -> bool:
        wanted = self.query_one("#log-rank", Select).value
        search = self.query_one("#log-search", Input).value
        return (wanted == -1 or wanted == rank) and (not search or search.lower() in line.lower())

    @staticmethod
    def _format_line(rank: int, stream: str, line: str) -> Text:
        colour = RANK_COLOURS[rank % len(RANK_COLOURS)]
        return Text.assemble((f"rank {rank} ", f"bold {colour}"), (line, "red" if stream == "stderr" else ""))

    def add(self, lines: list[tuple[int, str, str]], dropped: int = 0) -> None:
        self._lines.extend(lines)
        log = self.query_one("#log", RichLog)
        shown = [entry for entry in lines if self._matches(entry[0], entry[2])]
        skipped = dropped + max(0, len(shown) - MAX_LINES_PER_BATCH)
        if skipped:
            note = f"… {skipped} lines not drawn here (every line is in the run's log files)"
            log.write(Text(note, style="dim"))
        for entry in shown[-MAX_LINES_PER_BATCH:]:
            log.write(self._format_line(*entry))

    def refilter(self) -> None:
        log = self.query_one("#log", RichLog)
        log.clear()
        for entry in [e for e in self._lines if self._matches(e[0], e[2])][-SHOWN:]:
            log.write(self._format_line(*entry))

    def on_select_changed(self, event: Select.Changed) -> None:
        if event.select.id == "log-rank":
            self.refilter()

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "log-search":
            self.refilter()
