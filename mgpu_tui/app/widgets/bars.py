"""Small text gauges shared by the views: bars and sparklines as Rich Text."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text

from mgpu_tui.console import fmt_bytes

_SPARKS = "▁▂▃▄▅▆▇█"


def bar(fraction: float | None, width: int = 20) -> Text:
    """[██████░░░░] coloured green, then yellow above 70%, red above 90%."""
    if fraction is None:
        return Text("n/a".center(width + 2), style="dim")
    fraction = min(max(fraction, 0.0), 1.0)
    filled = round(fraction * width)
    style = "green" if fraction < 0.7 else "yellow" if fraction < 0.9 else "red"
    return Text.assemble("[", ("█" * filled, style), ("░" * (width - filled), "dim"), "]")


def progress(fraction: float, width: int = 40) -> Text:
    """━━━━━━━━━━────────  42%: done in green, the rest dim."""
    fraction = min(max(fraction, 0.0), 1.0)
    filled = int(fraction * width)
    return Text.assemble(("━" * filled, "green"), ("━" * (width - filled), "dim"), f" {fraction * 100:3.0f}%")


_LIMIT = 1e300  # past this a span overflows to inf: a value read from a file may be anything


def drawable(values: Sequence[float]) -> list[float]:
    """The values a chart can scale: NaN as 0, the rest clamped to +-1e300 (a telemetry file's
    1e308 or inf must not end the app; the figures shown beside a chart say the real value)."""
    return [min(max(v, -_LIMIT), _LIMIT) if v == v else 0.0 for v in values]


def spark(values: Sequence[float], width: int = 20, top: float = 100.0) -> Text:
    values = drawable(list(values)[-width:])
    count = len(_SPARKS)
    chars = "".join(
        _SPARKS[min(count - 1, max(0, int(v / top * count)))] if top else _SPARKS[0] for v in values
    )
    return Text(chars.rjust(width), style="cyan")


def spark_rows(
    values: Sequence[float],
    width: int,
    height: int,
    style: str = "cyan",
    line: Sequence[float] | None = None,
    line_style: str = "bold yellow",
    scale: tuple[float, float] | None = None,
) -> Text:
    """The last ``width`` values as a bar chart ``height`` rows high, scaled from their minimum
    to their maximum (so a steady series shows its wobble), or over ``scale`` (low, high: a share of
    all the cores, of all the memory); every value keeps at least a sliver.

    ``line``: a second series (a smoothed one), one value per bar, drawn over the bars on the
    same scale: the cell it passes through takes ``line_style`` (a dash where the bar is empty).
    """
    values = drawable(list(values)[-width:])
    if not values or width <= 0 or height <= 0:
        return Text("\n".join(" " * max(width, 0) for _ in range(max(height, 1))))
    line = drawable(list(line)[-len(values) :]) if line is not None else None
    low, high = scale if scale is not None and scale[1] > scale[0] else (min(values), max(values))
    span = high - low  # at most 2e300: finite
    levels = height * len(_SPARKS)  # eighths of a row

    def eighths_of(v: float) -> int:
        return 1 + round((min(max(v, low), high) - low) / span * (levels - 1)) if span else levels // 2

    eighths = [eighths_of(v) for v in values]
    # The row (from the bottom) each point of the line falls in.
    drawn = line is not None and len(line) == len(values)
    line_rows = [(eighths_of(v) - 1) // len(_SPARKS) for v in line] if line is not None and drawn else None
    pad = width - len(values)
    text = Text(style=style)
    for row in range(height - 1, -1, -1):  # top row first
        text.append(" " * pad)
        for col, e in enumerate(eighths):
            fill = min(max(e - row * len(_SPARKS), 0), len(_SPARKS))
            cell = _SPARKS[fill - 1] if fill else " "
            if line_rows is not None and line_rows[col] == row:
                text.append(cell if fill else "─", style=line_style)
            else:
                text.append(cell)
        if row:
            text.append("\n")
    return text


def smooth(values: Sequence[float], weight: float = 0.9) -> list[float]:
    """An exponential moving average (TensorBoard's smoothing, debiased at the start)."""
    out, average, norm = [], 0.0, 0.0
    for v in values:
        average = weight * average + (1 - weight) * v
        norm = weight * norm + (1 - weight)
        out.append(average / norm)
    return out


def fit(values: Sequence[float], width: int) -> list[float]:
    """At most ``width`` values covering all of ``values``: the mean of each of ``width`` equal
    spans, so a whole run fits a chart (its peaks are softened, never invented)."""
    values = list(values)
    if width <= 0 or len(values) <= width:
        return values
    edges = [round(i * len(values) / width) for i in range(width + 1)]
    return [sum(values[a:b]) / (b - a) for a, b in zip(edges, edges[1:]) if b > a]


def rate(bytes_per_s: float | None) -> str:
    return "n/a" if bytes_per_s is None else f"{fmt_bytes(bytes_per_s)}/s"
