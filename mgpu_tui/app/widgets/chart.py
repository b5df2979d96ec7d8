"""A titled bar chart of a series that fills its widget, drawn as text: a change repaints, never re-lays out.

Textual's Sparkline blends a colour per bar on every paint; this draws block
characters in one colour, which costs a fraction of that four times a second.
The bars span the minimum to the maximum of what is drawn (so a steady series
shows its wobble), which is why the title says what that range is.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from rich.text import Text
from textual.widget import Widget

from mgpu_tui.app.widgets.bars import spark_rows


def chart_title(title: str, values: Sequence[float], fmt: Callable[[float], str]) -> Text:
    """``title, last N steps · now X · range LOW to HIGH``: the figures behind the bars below."""
    text = Text(title, style="bold")
    if values:
        text.append(f", last {len(values):,} step{'s' if len(values) != 1 else ''}", style="bold")
        # Visible separators: an SVG screenshot drops spaces where the bold part ends.
        text.append(f" · now {fmt(values[-1])} · range {fmt(min(values))} to {fmt(max(values))}")
    return text


class Chart(Widget):
    DEFAULT_CSS = """
    Chart {
        height: 4;
    }
    """

    def __init__(self, title: str, fmt: Callable[[float], str] = str, **kwargs) -> None:
        super().__init__(**kwargs)
        self.title = title
        self.fmt = fmt
        self.values: list[float] = []

    def update(self, values: Sequence[float]) -> None:
        self.values = list(values)
        self.refresh()

    def render(self) -> Text:
        """The title and the range on the first row, the bars of the values that fit below it."""
        shown = self.values[-self.size.width:] if self.size.width > 0 else []
        chart = spark_rows(shown, self.size.width, max(1, self.size.height - 1))
        return Text.assemble(chart_title(self.title, shown, self.fmt), "\n", chart)
