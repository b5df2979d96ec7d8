"""A scrolling pane of log lines that costs only the rows on screen.

Lines are kept as they arrive, ``(rank, stream, text)``, in a bounded deque; a row
becomes a Strip only when it is painted. A flood of thousands of lines a second
therefore costs appending to a deque plus one screen of rows per frame (RichLog
renders every written line up front).

Growing the scrollable height re-lays out the whole screen, so it is done at most
once every ``GROW_EVERY_S``; while the pane follows the newest lines it draws the
tail whatever its scroll position says, so the lag never shows.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Iterable

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from textual.geometry import Region, Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.timer import Timer

from mgpu_tui.engine.protocol.rundir import JOB_OUTPUT
from mgpu_tui.engine.protocol.text import plain

RANK_COLOURS = ["cyan", "magenta", "green", "yellow", "blue", "red", "bright_cyan", "bright_magenta"]
GROW_EVERY_S = 1.0

_NOTE = Style(dim=True)
_STDERR = Style(color="red")
_PREFIX = [Style(bold=True, color=c) for c in RANK_COLOURS]

# (rank, stream, text); rank None is a note of the app's own ("… 300 lines not drawn").
Entry = tuple[int | None, str, str]


def printable(text: str) -> str:
    """What a terminal would leave on the line: the part after the last carriage return
    (progress bars redraw themselves that way), tabs expanded, no control characters."""
    if "\r" in text:
        parts = [p for p in text.split("\r") if p]
        text = parts[-1] if parts else ""
    if "\t" in text:
        text = text.expandtabs(8)
    return plain(text)  # the one sink: C0, C1, bidi and zero-width characters shown, not obeyed


def own_words(rank: int, text: str) -> str:
    """The line without the reporter's ``[rank N] `` when it names the same rank the row shows:
    the rank is said once, in colour, at the start of the row."""
    prefix = f"[rank {rank}] "
    return text[len(prefix) :] if text.startswith(prefix) else text


def _label(rank: int) -> str:
    """A row's prefix: its rank, or "job" for a command's own output (every process, merged)."""
    return "job " if rank == JOB_OUTPUT else f"rank {rank} "


def entry_segments(entry: Entry) -> list[Segment]:
    rank, stream, text = entry
    text = printable(text)
    if rank is None:
        return [Segment(text, _NOTE)]
    text = own_words(rank, text)
    prefix = Segment(_label(rank), _PREFIX[rank % len(_PREFIX)])
    return [prefix, Segment(text, _STDERR if stream == "stderr" else None)]


def entry_text(entry: Entry) -> str:
    """An entry as the one line of text its row shows (its rank's label first)."""
    return "".join(segment.text for segment in entry_segments(entry))


def entry_width(entry: Entry) -> int:
    rank, _, text = entry
    if rank is not None:
        text = own_words(rank, text)
    width = len(text) if text.isascii() else cell_len(text)
    return width + (0 if rank is None else len(_label(rank)))


class LogPane(ScrollView):
    """The newest ``max_lines`` entries; follows the end unless the user scrolled up."""

    class Grown(Message):
        """The rows the pane's lines take changed (at most once every GROW_EVERY_S): a box sized to
        them (log_view.py) follows."""

        def __init__(self, rows: int) -> None:
            super().__init__()
            self.rows = rows

    DEFAULT_CSS = """
    LogPane {
        overflow-y: scroll;
        overflow-x: auto;
    }
    """

    def __init__(self, max_lines: int, **kwargs) -> None:
        super().__init__(**kwargs)
        self.entries: collections.deque[Entry] = collections.deque(maxlen=max_lines)
        self.following = True
        self._widest = 0
        self._grown_at = 0.0
        self._grow_timer: Timer | None = None
        self._paint: tuple[Style, Region] | None = None
        # Wrapped (w): each entry as the rows it takes at the pane's width, and how many it takes.
        self.wrap = False
        self._rows: collections.deque[Strip] = collections.deque()
        self._row_counts: collections.deque[int] = collections.deque()
        self._wrap_width = 0

    def clear(self) -> None:
        self.entries.clear()
        self._widest = 0
        self.following = True
        self._rows.clear()
        self._row_counts.clear()
        self._grow(force=True)
        # An empty pane's growth cost nothing to lay out: the first lines after it grow it at once,
        # not a second later on a timer (a snapshot then drew one or the other, by the machine's load).
        self._grown_at = 0.0
        self.refresh()

    def toggle_wrap(self) -> bool:
        """Long lines wrap onto the rows under them, or scroll sideways; whether they wrap now."""
        self.wrap = not self.wrap
        self._rewrap()
        self._grow(force=True)
        self.refresh()
        return self.wrap

    def _wrapped(self, entry: Entry) -> list[Strip]:
        width = max(1, self._wrap_width)
        strip = Strip(entry_segments(entry))
        length = strip.cell_length
        if length <= width:
            return [strip]
        return list(strip.divide([*range(width, length, width), length]))

    def _rewrap(self) -> None:
        self._rows.clear()
        self._row_counts.clear()
        if not self.wrap:
            return
        self._wrap_width = self.scrollable_content_region.width or self.size.width or 80
        for entry in self.entries:
            rows = self._wrapped(entry)
            self._rows.extend(rows)
            self._row_counts.append(len(rows))

    def on_resize(self) -> None:
        if self.wrap and (self.scrollable_content_region.width or self.size.width) != self._wrap_width:
            self._rewrap()
            self._grow(force=True)

    def extend(self, entries: Iterable[Entry]) -> None:
        entries = list(entries)
        if self.entries.maxlen is not None:  # what would leave at once is never measured
            entries = entries[-self.entries.maxlen :]
        if not entries:
            return
        before = len(self.entries)
        self.entries.extend(entries)
        shifted = before + len(entries) - len(self.entries)  # dropped from the top
        self._widest = max(self._widest, max(map(entry_width, entries)))
        if self.wrap:
            for _ in range(shifted):
                for _ in range(self._row_counts.popleft() if self._row_counts else 0):
                    self._rows.popleft()
            for entry in entries:
                rows = self._wrapped(entry)
                self._rows.extend(rows)
                self._row_counts.append(len(rows))
        if not self.following and shifted:
            # Keep the lines the user is reading where they are.
            self.scroll_to(y=max(0, self.scroll_y - shifted), animate=False)
        self._grow()
        self.refresh()

    def _grow(self, force: bool = False) -> None:
        """Bring the scrollable size up to the content, at most once every GROW_EVERY_S."""
        wanted = self._content_size()
        if wanted == self.virtual_size:
            return
        wait = GROW_EVERY_S - (time.monotonic() - self._grown_at)
        if wait > 0 and not force:
            if self._grow_timer is None:
                self._grow_timer = self.set_timer(wait, self._grow_now)
            return
        self._grow_now()

    def _grow_now(self) -> None:
        self._grow_timer = None
        self._grown_at = time.monotonic()
        self.virtual_size = self._content_size()
        self.post_message(self.Grown(self.virtual_size.height))
        if self.following:
            self.scroll_end(animate=False, immediate=True)

    def _content_size(self) -> Size:
        if self.wrap:
            return Size(self._wrap_width, len(self._rows))
        return Size(self._widest, len(self.entries))

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        super().watch_scroll_y(old_value, new_value)
        if new_value < old_value and not self.following:
            return
        # Back at the end (End key, scrolling down, dragging): follow again; moved up: stop.
        self.following = new_value >= self.max_scroll_y

    def render_lines(self, crop: Region) -> list[Strip]:
        # What every row needs, found once per paint: the widget's style walks its ancestors,
        # and looked up per row it cost more than the row itself.
        self._paint = (self.rich_style, self.scrollable_content_region)
        try:
            return super().render_lines(crop)
        finally:
            self._paint = None

    def render_line(self, y: int) -> Strip:
        style, content = self._paint or (self.rich_style, self.scrollable_content_region)
        count = len(self._rows) if self.wrap else len(self.entries)
        if self.following:
            index = count - content.height + y
            index = y if index < y else index  # fewer lines than rows: from the top
        else:
            index = int(self.scroll_y) + y
        if not 0 <= index < count:
            return Strip.blank(content.width, style)
        strip = self._rows[index] if self.wrap else Strip(entry_segments(self.entries[index]))
        left = int(self.scroll_x)
        return strip.crop_extend(left, left + content.width, style).apply_style(style)
