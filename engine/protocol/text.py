"""The one sink for text that mgpu-tui did not write itself: a rank's output, a file's content, a
path, an exception, a peer's record. Everything of that kind passes :func:`plain` before it is
shown in a terminal, written in a log line or put in the app (docs/architecture.md, "The trust
boundary").

What it makes visible, so that none of it can act on a terminal or hide what follows:

- C0 controls but newline and tab (ESC shows as ``^[``, as a terminal echoes it), and DEL (``^?``);
- C1 controls (U+0080-U+009F; U+009B starts an escape sequence as ESC [ does) as ``\\x9b``;
- every other character Python does not call printable: bidi overrides, embeddings and
  isolates (U+202A-U+202E, U+2066-U+2069, which reorder what a reader sees), zero-width
  characters (U+200B-U+200D, U+2060, U+FEFF), line and paragraph separators, private-use and
  unassigned code points, as ``<U+202E>``. Spaces other than the ASCII one become that space.

Rich markup is never parsed from such text: the app shows it as ``Text`` (``markup=False``).
"""

from __future__ import annotations

import logging
import unicodedata
from collections.abc import Iterable

KEEP = frozenset("\n\t")


def visible(char: str) -> str:
    """How one character that must not reach a terminal is shown instead."""
    code = ord(char)
    if code < 0x20:
        return "^" + chr(code + 0x40)
    if code == 0x7F:
        return "^?"
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"<U+{code:04X}>"


def _shown(char: str) -> str:
    if char.isprintable() or char in KEEP:
        return char
    if unicodedata.category(char) == "Zs":
        return " "
    return visible(char)


def plain(text: str, limit: int | None = None) -> str:
    """``text`` safe for a terminal, a log line or the app: newlines and tabs kept, every other
    character that is not printable shown visibly; cut to ``limit`` characters when one is given."""
    if limit is not None:
        text = text[:limit]
    if text.isprintable() or text.replace("\n", "").replace("\t", "").isprintable():
        return text
    return "".join(map(_shown, text))


def plain_line(text: str, limit: int | None = None) -> str:
    """:func:`plain`, as one line: newlines and tabs become spaces."""
    return plain(text.replace("\n", " ").replace("\t", " ").replace("\r", " "), limit)


def short_line(text: str, limit: int) -> str:
    """:func:`plain_line` with every run of spaces made one, cut to ``limit`` characters with "…"
    where it is longer: a command line (a whole ``python -c`` program) named in a sentence."""
    text = " ".join(text.split())
    return plain(text if len(text) <= limit else text[: limit - 1] + "…")


class PlainFormatter(logging.Formatter):
    """A log file's lines through the sink: a rank's text logged by the engine keeps no ESC."""

    def format(self, record: logging.LogRecord) -> str:
        return plain(super().format(record))


def nearest(word: str, choices: Iterable[str]) -> list[str]:
    """The choices one or two edits from ``word`` (a letter typed wrong, missing, extra, or two
    swapped), the nearest only; none for a word too short to guess from (two edits need five
    letters). For "did you mean" in a sentence about a mistyped mode or flag."""
    distances = {choice: _edits(word, choice) for choice in choices}
    if not distances:
        return []
    best = min(distances.values())
    if best > min(2, len(word) // 2):
        return []
    return [choice for choice, d in distances.items() if d == best]


def _edits(a: str, b: str) -> int:
    """Edits from a to b: letters changed, added, removed, or two neighbours swapped."""
    before: list[int] | None = None
    row = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        now = [i] + [0] * len(b)
        for j, y in enumerate(b, 1):
            now[j] = min(row[j] + 1, now[j - 1] + 1, row[j - 1] + (x != y))
            if before is not None and j > 1 and x == b[j - 2] and a[i - 2] == y:
                now[j] = min(now[j], before[j - 2] + 1)
        before, row = row, now
    return row[-1]
