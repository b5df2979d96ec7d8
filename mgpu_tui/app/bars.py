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


def spark(values: Sequence[float], width: int = 20, top: float = 100.0) -> Text:
    values = list(values)[-width:]
    chars = "".join(_SPARKS[min(len(_SPARKS) - 1, int(v / top * len(_SPARKS)))] if top else _SPARKS[0]
                    for v in values)  # fmt: skip
    return Text(chars.rjust(width), style="cyan")


def rate(bytes_per_s: float | None) -> str:
    return "n/a" if bytes_per_s is None else f"{fmt_bytes(bytes_per_s)}/s"
