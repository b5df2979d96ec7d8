"""A titled bar chart of a series that fills its widget, drawn as text: a change repaints, never re-lays out.

Textual's Sparkline blends a colour per bar on every paint; this draws block
characters in one colour, which costs a fraction of that four times a second.
The bars span the minimum to the maximum of what is drawn (so a steady series
shows its wobble), which is why the title says what that range is; a chart of a
share (a percent, the memory of a machine) has a fixed scale instead, said as
such. A chart of
the ``whole`` series fits all of it to its width (the mean of each span) instead
of drawing the latest values only; a smoothed line over the bars shows the trend
through the noise of single steps, and an axis says which steps are drawn.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from rich.text import Text
from textual.widget import Widget

from mgpu_tui.app.widgets.bars import fit, smooth, spark_rows


def chart_title(
    title: str,
    values: Sequence[float],
    fmt: Callable[[float], str],
    *,
    span: str | None = None,
    width: int | None = None,
    unit: str = "step",
    scale: tuple[float, float] | None = None,
) -> Text:
    """``title, last N steps · now X · range LOW to HIGH``: the figures behind the bars below (``unit``:
    what a value is, a step or a second). ``span`` replaces "last N steps" (a whole series says how
    much it covers). Within ``width``, the range goes first, then the latest value: the title stays
    on its one row."""
    if width is not None and 1 < width < len(title):
        return Text(title[: width - 1] + "…", style="bold")  # one row, whatever the width
    text = Text(title, style="bold")
    if values:
        span = span or f"last {len(values):,} {unit}{'s' if len(values) != 1 else ''}"
        if width is not None and len(text) + len(span) + 2 > width:
            return text  # the axis below says which steps are drawn
        text.append(f", {span}", style="bold")
        # Visible separators: an SVG screenshot drops spaces where the bold part ends.
        now = f" · now {fmt(values[-1])}"
        if scale is not None:  # the bars' own scale, fixed: the height means the same all run long
            spread = f" · scale {fmt(scale[0])} to {fmt(scale[1])}"
        else:
            spread = f" · range {fmt(min(values))} to {fmt(max(values))}"
        for extra in (now + spread, now, ""):
            if width is None or len(text) + len(extra) <= width:
                text.append(extra)
                break
    return text


LEGEND = "─ smoothed"  # the line over the bars, named on the axis row in the line's own style
LINE_STYLE = "bold yellow"


def axis(steps: Sequence[int], width: int, legend: bool = False) -> Text:
    """The x axis under the bars: the first step drawn at the left, the last at the right; with
    ``legend``, the smoothed line's name between them where it fits."""
    if not steps or width <= 0:
        return Text(" " * max(width, 0))
    left, right = f"step {steps[0]:,}", f"{steps[-1]:,}"
    gap = width - len(left) - len(right)
    if gap < 1:
        return Text(right.rjust(width)[:width], style="dim")
    if not legend or gap < len(LEGEND) + 2:
        return Text(left + " " * gap + right, style="dim")
    before = (gap - len(LEGEND)) // 2
    after = gap - len(LEGEND) - before
    return Text.assemble((left + " " * before, "dim"), (LEGEND, LINE_STYLE), (" " * after + right, "dim"))


class Chart(Widget):
    DEFAULT_CSS = """
    Chart {
        height: 4;
    }
    """

    def __init__(
        self,
        title: str,
        fmt: Callable[[float], str] = str,
        *,
        whole: str | None = None,
        smoothed: bool = False,
        unit: str = "step",
        scale: tuple[float, float] | None = None,
        **kwargs,
    ) -> None:
        """``whole``: draw the whole series (fitted to the width), and say so with this text
        ("the whole run"); else the latest values that fit. ``smoothed``: a moving average drawn
        over the bars. Steps given to :meth:`update` label an x axis under the bars."""
        super().__init__(**kwargs)
        self.title = title
        self.fmt = fmt
        self.whole = whole
        self.smoothed = smoothed
        self.unit = unit  # what one value is: a step, or a sample of the machine
        self.scale = scale  # (low, high) the bars span; None: the values' own range
        self.values: list[float] = []
        self.steps: list[int] = []

    def update(self, values: Sequence[float], steps: Sequence[int] | None = None) -> None:
        self.values = list(values)
        self.steps = list(steps) if steps is not None and len(steps) == len(self.values) else []
        self.refresh()

    def render(self) -> Text:
        """The title and the range on the first row, the bars of the values that fit below it,
        and the steps they span on the last row when known."""
        width = self.size.width
        rows = max(1, self.size.height - 1 - (1 if self.steps else 0))
        if self.whole:
            shown = fit(self.values, width) if width > 0 else []
            steps = self.steps
            title = chart_title(
                self.title, self.values, self.fmt, span=self.whole, width=width, scale=self.scale
            )
        else:
            shown = self.values[-width:] if width > 0 else []
            steps = self.steps[-width:]
            title = chart_title(self.title, shown, self.fmt, width=width, unit=self.unit, scale=self.scale)
        line = smooth(shown) if self.smoothed and len(shown) > 2 else None
        bars = spark_rows(shown, width, rows, line=line, line_style=LINE_STYLE, scale=self.scale)
        parts: list[str | Text] = [title, "\n", bars]
        if self.steps:
            parts += ["\n", axis(steps, width, legend=line is not None)]
        return Text.assemble(*parts)
