"""The charts of ``compare`` and ``scale`` in the terminal: bars and sparklines of plain characters,
fitted to the width they are drawn in (the app's Compare view draws the same)."""

from __future__ import annotations

import math
import textwrap
from collections.abc import Callable, Sequence

from mgpu_tui.console import fmt_bytes, fmt_loss, fmt_rate
from mgpu_tui.engine.compare.comparison import Comparison, Row
from mgpu_tui.engine.compare.scaling import ScalePoint
from mgpu_tui.reports.compare import fmt_speedup, loss_header

SPARKS = "▁▂▃▄▅▆▇█"


BAR_WIDTH = 30


SPARK_WIDTH = 40


MIN_BAR = 8  # the narrowest bar or sparkline that still tells its rows apart


def bars(labels: Sequence[str], values: Sequence[float | None], fmt: Callable, width: int = BAR_WIDTH) -> str:
    """A bar a label, ``width`` columns for the largest value."""
    top = max((v for v in values if v), default=0)
    pad = max(len(label) for label in labels)
    lines = []
    for label, v in zip(labels, values):
        n = round(width * v / top) if v and top else 0
        lines.append(f"{label:<{pad}}  {'█' * n}{' ' * (width - n)}  {fmt(v)}")
    return "\n".join(lines)


def fitted_bars(
    labels: Sequence[str], values: Sequence[float | None], fmt: Callable, width: int | None
) -> str:
    """:func:`bars` in ``width`` columns (None: the usual BAR_WIDTH), figures included."""
    return bars(labels, values, fmt, room(width, labels, [fmt(v) for v in values], BAR_WIDTH))


def _peak_bars(
    labels: Sequence[str], peaks: Sequence[tuple[int, int | None] | None], width: int | None = None
) -> str:
    """Bars of the measured tensor peaks, each labelled with the plan's figure beside it."""
    values = [p[0] if p else None for p in peaks]
    plans = ["" if p is None or p[1] is None else f" (plan {fmt_bytes(p[1])})" for p in peaks]
    said = [fmt_bytes(v) + plan for v, plan in zip(values, plans)]
    lines = bars(labels, values, fmt_bytes, room(width, labels, said, BAR_WIDTH)).splitlines()
    return "\n".join(line + plan for line, plan in zip(lines, plans))


def sparkline(values: Sequence[float], lo: float, hi: float, width: int = 40) -> str:
    """``values`` resampled to ``width`` columns, each a block scaled between ``lo`` and ``hi``."""
    values = [v for v in values if v is not None and math.isfinite(v)]
    if not values:
        return ""
    picks = [values[min(len(values) - 1, i * len(values) // width)] for i in range(min(width, len(values)))]
    span = hi - lo or 1.0
    return "".join(SPARKS[min(7, max(0, int((v - lo) / span * 7.999)))] for v in picks)


def room(width: int | None, labels: Sequence[str], texts: Sequence[str], most: int) -> int:
    """Columns for a bar or a sparkline between its label and its figure, in ``width`` columns
    (None: ``most``): never more than ``most``, never under MIN_BAR."""
    if width is None:
        return most
    used = max((len(t) for t in labels), default=0) + max((len(t) for t in texts), default=0) + 4
    return max(MIN_BAR, min(most, width - used))


def curves(rows: Sequence[Row], which: str, width: int | None = None) -> str:
    series = {r.name: [v for _, v in getattr(r, which)] for r in rows if getattr(r, which)}
    if not series:
        return "(no steps)"
    every = [v for vs in series.values() for v in vs if math.isfinite(v)]
    lo, hi = min(every), max(every)
    pad = max(len(m) for m in series)
    fmt = fmt_loss if which == "loss_curve" else fmt_rate
    ends = {mode: f"{fmt(vs[0])} -> {fmt(vs[-1])}" for mode, vs in series.items()}
    columns = room(width, list(series), list(ends.values()), SPARK_WIDTH)
    return "\n".join(
        f"{mode:<{pad}}  {sparkline(vs, lo, hi, columns)}  {ends[mode]}" for mode, vs in series.items()
    )


def _tensor_peak(r: Row) -> tuple[int, int | None] | None:
    """The largest rank's live tensors at their peak, and the plan's peak for that rank."""
    known = [
        (m.tensor_peak_bytes, m.predicted_total_bytes) for m in r.memory if m.tensor_peak_bytes is not None
    ]
    return max(known, key=lambda pair: pair[0]) if known else None


def compare_charts(comparison: Comparison, width: int | None = None) -> str:
    """The comparison's charts as text; ``width``: the columns they must fit in, no line longer
    (bars and sparklines shrink; None: their usual widths)."""
    rows = comparison.rows
    labels = [r.name for r in rows]
    peaks = [_tensor_peak(r) for r in rows]

    def title(text: str) -> str:
        return textwrap.fill(text, width) if width else text

    tensors = (
        [
            title("live tensors at their peak (largest rank), the plan's beside"),
            _peak_bars(labels, peaks, width),
            "",
        ]
        if any(peaks)
        else []
    )
    return "\n".join(
        [
            "samples/s",
            fitted_bars(labels, [r.samples_per_s for r in rows], fmt_rate, width),
            "",
            *tensors,
            title("peak memory (largest rank)" + (": the whole process" if tensors else "")),
            fitted_bars(labels, [r.peak_mem_bytes for r in rows], fmt_bytes, width),
            "",
            title("loss over steps (one scale for all)"),
            curves(rows, "loss_curve", width),
            "",
            title("samples/s over steps (one scale for all)"),
            curves(rows, "throughput_curve", width),
        ]
    )


def _point_label(comparison: Comparison, p: ScalePoint) -> str:
    return f"batch {p.batch_size}" if comparison.scale.sweep == "batch" else f"{p.nproc} rank(s)"


def scale_charts(comparison: Comparison) -> str:
    points = comparison.points()
    labels = [_point_label(comparison, p) for p in points]
    losses = bars(labels, [p.loss_after_common_samples for p in points], fmt_loss)
    loss = f"\n\n{loss_header(comparison)}\n{losses}"
    if comparison.scale.sweep == "batch":
        return "samples/s\n" + bars(labels, [p.samples_per_s for p in points], fmt_rate) + loss
    ideal = [p.nproc / points[0].nproc for p in points] if points else []
    speed = bars(labels, [p.speedup for p in points], fmt_speedup)
    return "speedup (ideal: " + ", ".join(f"{v:g}x" for v in ideal) + ")\n" + speed + loss
