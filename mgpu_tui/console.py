"""Plain-text rendering for the headless commands: progress lines and tables.

No textual or rich here: the headless commands must start fast and write text
that reads well in a terminal, a CI log or a pipe alike.
"""

from __future__ import annotations

import contextlib
import math
import shutil
import sys
import textwrap
from collections.abc import Iterator, Sequence
from typing import Any, TextIO

from mgpu_tui.engine.protocol.text import plain  # the one sink: re-exported for the commands

__all__ = [
    "CLEAR_LINE",
    "PlainStream",
    "fmt_bytes",
    "fmt_loss",
    "fmt_percent",
    "fmt_rank_loss",
    "fmt_rate",
    "fmt_seconds",
    "plain",
    "plain_output",
    "redraw",
    "status_word",
    "table",
]

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
    """A run's status as every screen says it: the word summary.json holds ("interrupted" for a run
    stopped on request; "stopped" is a rank's state, frozen by SIGSTOP or a debugger)."""
    return str(status)


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


MIN_WRAPPED = 20  # a wrapped column keeps at least this many characters a line
GAP = 2  # spaces between columns
TERMINAL = -1  # table()'s width: the terminal's, where the output is one


def terminal_width() -> int | None:
    """The terminal's columns when the output is a terminal; None (no limit) when it goes to a file
    or a pipe, which keep each row whole for the programs that read them."""
    stream = sys.__stdout__
    if stream is None or not stream.isatty():
        return None
    return shutil.get_terminal_size().columns


def table(
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    right: Sequence[int] = (),
    width: int | None = TERMINAL,
) -> str:
    """A plain aligned table; columns listed in ``right`` are right-aligned (numbers). Within
    ``width`` columns (by default the terminal's, :func:`terminal_width`; None: no limit): the
    widest text column wraps, and a table still too wide is cut into parts, one under the other,
    each led by the first column."""
    if width == TERMINAL:
        width = terminal_width()
    cells = [[str(c) for c in headers], *([str(c) for c in row] for row in rows)]
    widths = [max(len(c) for c in col) for col in zip(*cells)]
    every = list(range(len(widths)))
    if width is None or _span(widths) <= width:
        return _draw(cells, widths, right, every)
    parts = _parts(_fitted(widths, every, right, width), width)
    drawn = []
    for part in parts:  # each part fitted again: its text columns take the room the others left
        fitted = _fitted(widths, part, right, width)
        drawn.append(_draw(cells, fitted, right, part))
    return "\n\n".join(drawn)


def _span(widths: Sequence[int]) -> int:
    return sum(widths) + GAP * (len(widths) - 1)


def _fitted(widths: list[int], columns: list[int], right: Sequence[int], width: int) -> list[int]:
    """``widths`` with the widest text columns among ``columns`` narrowed (to MIN_WRAPPED at the
    least) until those columns fit ``width``, where they can."""
    fitted = list(widths)
    for i in sorted((i for i in columns if i > 0 and i not in right), key=lambda i: -widths[i]):
        over = _span([fitted[j] for j in columns]) - width
        if over <= 0:
            break
        fitted[i] = max(fitted[i] - over, min(fitted[i], MIN_WRAPPED))
    return fitted


def _parts(widths: list[int], width: int) -> list[list[int]]:
    """The columns in groups that fit ``width``, each led by column 0."""
    parts, part = [], [0]
    for i in range(1, len(widths)):
        if len(part) > 1 and _span([widths[j] for j in [*part, i]]) > width:
            parts.append(part)
            part = [0]
        part.append(i)
    parts.append(part)
    return parts


def _draw(cells: list[list[str]], widths: list[int], right: Sequence[int], columns: list[int]) -> str:
    """The rows of ``columns``; a cell longer than its column wraps onto lines of its own."""

    def line(row: Sequence[str]) -> str:
        return "  ".join(
            row[k].rjust(widths[i]) if i in right else row[k].ljust(widths[i]) for k, i in enumerate(columns)
        ).rstrip()

    out = []
    for n, row in enumerate(cells):
        wrapped = [_wrap(row[i], widths[i]) for i in columns]
        for depth in range(max(len(w) for w in wrapped)):
            out.append(line([w[depth] if depth < len(w) else "" for w in wrapped]))
        if n == 0:
            out.append(line(["-" * widths[i] for i in columns]))
    return "\n".join(out)


def _wrap(cell: str, width: int) -> list[str]:
    if len(cell) <= width:
        return [cell]
    return textwrap.wrap(cell, width, break_on_hyphens=False) or [cell[:width]]
