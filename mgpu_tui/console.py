"""Plain-text rendering for the headless commands: progress lines and tables.

No textual or rich here: the headless commands must start fast and write text
that reads well in a terminal, a CI log or a pipe alike.
"""

from __future__ import annotations

import contextlib
import math
import sys
from collections.abc import Iterator, Sequence
from typing import Any, TextIO

from mgpu_tui.engine.protocol.text import plain  # the one sink: re-exported for the commands

__all__ = ["CLEAR_LINE", "PlainStream", "plain", "redraw"]

CLEAR_LINE = "\r\x1b[K"  # the live progress line's own control sequence, the only one the CLI writes


class PlainStream:
    """The CLI's stdout or stderr: every write passes the one sink (:func:`plain`), so no text from a
    rank, a file, a path or an exception reaches the terminal as control characters, whichever code
    prints it. Only the live progress line's own sequence goes through, by :func:`redraw`."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        self.stream.write(plain(text))
        return len(text)

    def control(self, sequence: str) -> None:
        self.stream.write(sequence)

    def __getattr__(self, name: str) -> Any:  # flush, isatty, fileno, encoding, buffer...
        return getattr(self.stream, name)


def redraw(stream: TextIO | PlainStream, line: str = "") -> None:
    """Clear the live progress line and draw ``line`` (made plain) in its place."""
    if isinstance(stream, PlainStream):
        stream.control(CLEAR_LINE)
        stream.write(line)
    else:
        stream.write(CLEAR_LINE + plain(line))


@contextlib.contextmanager
def plain_output() -> Iterator[None]:
    """While the CLI runs: sys.stdout and sys.stderr through the sink; restored afterwards."""
    saved = sys.stdout, sys.stderr
    sys.stdout = PlainStream(sys.stdout)
    sys.stderr = PlainStream(sys.stderr)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved


def status_word(status: str) -> str:
    """A run's status as every screen says it: a run the user stopped is "stopped" (the JSON and the
    summary file keep "interrupted", their documented value), the rest as they are."""
    return "stopped" if status == "interrupted" else status


def fmt_bytes(n: float | None) -> str:
    if n is None:
        return "n/a"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def fmt_percent(x: float) -> str:
    return f"{x:.0f}%"


def fmt_rate(x: float | None) -> str:
    return "n/a" if x is None else f"{x:,.0f}"


def fmt_loss(x: float | None) -> str:
    if x is None:
        return "n/a"
    return f"{x:.4f}" if math.isfinite(x) else str(x)


def fmt_rank_loss(loss: float | None, diverged_at: int | None) -> str:
    """A rank's loss, or where it diverged (NaN or infinite, which the events carry as null): never
    "n/a" as if it had no loss."""
    if loss is None and diverged_at is not None:
        return f"NaN at step {diverged_at}"
    return fmt_loss(loss)


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
