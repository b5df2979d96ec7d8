"""Plain-text rendering for the headless commands: progress lines and tables.

No textual or rich here: the headless commands must start fast and write text
that reads well in a terminal, a CI log or a pipe alike.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

# Every control character but newline and tab: C0, DEL and C1 (0x9b starts an escape sequence
# on some terminals as ESC [ does).
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _visible(char: str) -> str:
    code = ord(char)
    if code < 0x20:
        return "^" + chr(code + 0x40)  # ESC shows as ^[, as a terminal echoes it
    return "^?" if code == 0x7F else f"\\x{code:02x}"


def plain(text: str) -> str:
    """Text that came from a rank, a path or an exception, made safe for a terminal: every
    control character but newline and tab is shown as a visible escape, so none can move the
    cursor, clear the screen, retitle the window or hide what follows."""
    return text if text.isprintable() else _CONTROL.sub(lambda m: _visible(m.group()), text)


def fmt_bytes(n: float | None) -> str:
    if n is None:
        return "n/a"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def fmt_rate(x: float | None) -> str:
    return "n/a" if x is None else f"{x:,.0f}"


def fmt_loss(x: float | None) -> str:
    if x is None:
        return "n/a"
    return f"{x:.4f}" if math.isfinite(x) else str(x)


def fmt_seconds(x: float | None) -> str:
    if x is None:
        return "n/a"
    return f"{x * 1000:.1f} ms" if x < 1 else f"{x:.2f} s"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[int] = ()) -> str:
    """A plain aligned table; columns listed in ``right`` are right-aligned (numbers)."""
    widths = [max(len(str(c)) for c in col) for col in zip(headers, *rows)]

    def line(cells) -> str:
        out = []
        for i, (cell, width) in enumerate(zip(cells, widths)):
            out.append(str(cell).rjust(width) if i in right else str(cell).ljust(width))
        return "  ".join(out).rstrip()

    return "\n".join([line(headers), line("-" * w for w in widths), *(line(r) for r in rows)])
