"""A titled bar chart of a series that fills its widget, drawn as text: a change repaints, never re-lays out.

Textual's Sparkline blends a colour per bar on every paint; this draws block
characters in one colour, which costs a fraction of that four times a second.
The bars span the minimum to the maximum of what is drawn (so a steady series
shows its wobble), which is why the title says what that range is. A chart of
the ``whole`` series fits all of it to its width (the mean of each span) instead
of drawing the latest values only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from rich.text import Text
from textual.widget import Widget

from mgpu_tui.app.widgets.bars import fit, spark_rows


def chart_title(title: str, values: Sequence[float], fmt: Callable[[float], str], *,
                span: str | None = None, width: int | None = None) -> Text:  # fmt: skip
    """``title, last N steps · now X · range LOW to HIGH``: the figures behind the bars below.
    ``span`` replaces "last N steps" (a whole series says how much it covers). Within ``width``,
    the range goes first, then the latest value: the title stays on its one row."""
    text = Text(title, style="bold")
    if values:
        span = span or f"last {len(values):,} step{'s' if len(values) != 1 else ''}"
        text.append(f", {span}", style="bold")
        # Visible separators: an SVG screenshot drops spaces where the bold part ends.
        now, spread = f" · now {fmt(values[-1])}", f" · range {fmt(min(values))} to {fmt(max(values))}"
        for extra in (now + spread, now, ""):
            if width is None or len(text) + len(extra) <= width:
                text.append(extra)
                break
    return text


class Chart(Widget):
    DEFAULT_CSS = """
    Chart {
        height: 4;
    }
    """

    def __init__(self, title: str, fmt: Callable[[float], str] = str, *, whole: str | None = None,
                 **kwargs) -> None:  # fmt: skip
        """``whole``: draw the whole series, and say so with this text ("the whole run")."""
        super().__init__(**kwargs)
        self.title = title
        self.fmt = fmt
        self.whole = whole
        self.values: list[float] = []

    def update(self, values: Sequence[float]) -> None:
        self.values = list(values)
        self.refresh()

    def render(self) -> Text:
        """The title and the range on the first row, the bars of the values that fit below it."""
        width = self.size.width
        if self.whole:
            shown = fit(self.values, width) if width > 0 else []
            title = chart_title(self.title, self.values, self.fmt, span=self.whole, width=width)
        else:
            shown = self.values[-width:] if width > 0 else []
            title = chart_title(self.title, shown, self.fmt, width=width)
        chart = spark_rows(shown, width, max(1, self.size.height - 1))
        return Text.assemble(title, "\n", chart)
