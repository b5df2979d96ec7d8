"""One row: what the run is doing on the left, its progress as a bar and a percentage on the right.

Drawn as text, so a change repaints the row and nothing else (Textual's ProgressBar
is four widgets, and each is one more for every tab switch to show and lay out).
"""

from __future__ import annotations

from rich.text import Text
from textual.widget import Widget

from mgpu_tui.app.widgets.bars import progress

BAR_WIDTH = 40  # at most; the words come first (at 80 columns they name the stop key)
MIN_BAR_WIDTH = 10


class StatusLine(Widget):
    DEFAULT_CSS = """
    StatusLine {
        height: 1;
    }
    """

    def __init__(self, text: str = "", **kwargs) -> None:
        super().__init__(**kwargs)
        self.text = text
        self.done: float | None = None  # the fraction of the run done; None: no bar

    def update(self, text: str, done: float | None = None) -> None:
        self.text, self.done = text, done
        self.refresh()

    def render(self) -> Text:
        if self.done is None:
            return Text(self.text, no_wrap=True, overflow="ellipsis")
        left = Text(self.text, no_wrap=True, overflow="ellipsis")
        percent = 5  # " 100%"
        room_for_bar = self.size.width - left.cell_len - 2 - percent
        if room_for_bar < MIN_BAR_WIDTH:  # the words first (the loss, at 80 columns): the share alone
            share = Text(f" {min(max(self.done, 0.0), 1.0) * 100:.0f}%")
            left.truncate(max(0, self.size.width - share.cell_len), overflow="ellipsis", pad=True)
            return Text.assemble(left, share)
        width = min(BAR_WIDTH, room_for_bar)
        bar = progress(self.done, width)
        room = max(0, self.size.width - bar.cell_len - 2)
        left.truncate(room, overflow="ellipsis", pad=True)
        return Text.assemble(left, "  ", bar)
