"""One row: what the run is doing on the left, its progress as a bar and a percentage on the right.
Its words are a head, cut first (a script's command line), and the figures after it, kept whole
(at 80 columns a script's loss was cut for its path).

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
        self.keep = ""  # the figures after the words: cut last
        self.done: float | None = None  # the fraction of the run done; None: no bar

    def update(self, text: str, done: float | None = None, keep: str = "") -> None:
        """``text``, then ``keep`` (the figures), which the row cuts only once ``text`` is gone."""
        self.text, self.done, self.keep = text, done, keep
        self.refresh()

    def _words(self, room: int) -> Text:
        """The words within ``room`` columns: the head cut (with …) before the figures kept."""
        keep = Text(self.keep, no_wrap=True)
        head = Text(self.text, no_wrap=True, overflow="ellipsis")
        head.truncate(max(0, room - keep.cell_len), overflow="ellipsis")
        words = Text.assemble(head, keep)
        words.truncate(max(0, room), overflow="ellipsis", pad=True)
        return words

    def render(self) -> Text:
        width = self.size.width
        if self.done is None:
            return self._words(width)
        length = Text(self.text + self.keep).cell_len
        percent = 5  # " 100%"
        room_for_bar = width - length - 2 - percent
        if room_for_bar < MIN_BAR_WIDTH:  # the words first (the loss, at 80 columns): the share alone
            share = Text(f" {min(max(self.done, 0.0), 1.0) * 100:.0f}%")
            return Text.assemble(self._words(width - share.cell_len), share)
        bar = progress(self.done, min(BAR_WIDTH, room_for_bar))
        return Text.assemble(self._words(max(0, width - bar.cell_len - 2)), "  ", bar)
