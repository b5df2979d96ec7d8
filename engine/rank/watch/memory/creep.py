"""The classic leak, found exactly: a step's loss kept alive with its graph (``losses.append(loss)``
in place of ``loss.item()``), each step's. The watch holds a weak reference to each step's first
loss (the tensor ``backward()`` was called on), from WARM_UP on; at each step's end it counts those
still alive with a ``grad_fn``, the last two steps' left out (a loop's own variable holds the
latest). The count is the step event's ``kept_graphs``; the first time it reaches LEAK_AT, the
holder is looked for once, among the main thread's frames: a list, tuple, deque or dict that holds
the loss itself, its name, and the line of its function that adds to it (``kept_by``), the frames'
snapshots of their locals let go after (wrapping.forget_locals)."""

from __future__ import annotations

import collections
import inspect
import os
import re
import weakref
from types import FrameType
from typing import Any

from mgpu_tui.engine.rank.watch.wrapping import forget_locals

WARM_UP = 3  # steps before a loss is watched
LEAK_AT = 8  # earlier steps' losses alive at once: a leak (engine/run/memory/memory_parts.py's too)
HELD = 64  # steps watched at once
MAX_SCANNED = 100_000  # items of one container looked through for the loss


class Creep:
    def __init__(self) -> None:
        self._refs: collections.deque[weakref.ref] = collections.deque(maxlen=HELD)
        self._this_step: weakref.ref | None = None
        self.kept_by: str | None = None
        self._looked = False

    def loss(self, tensor: Any) -> None:
        """A backward's loss (the step's first is watched), with its graph."""
        if self._this_step is None and getattr(tensor, "grad_fn", None) is not None:
            self._this_step = weakref.ref(tensor)

    def at_step(self, step: int, frame: FrameType | None) -> int | None:
        """How many earlier steps' losses are still alive with their graphs (None: none)."""
        ref, self._this_step = self._this_step, None
        if ref is not None and step > WARM_UP:
            self._refs.append(ref)
        alive = [t for t in (r() for r in list(self._refs)[:-2]) if t is not None and t.grad_fn is not None]
        if len(alive) >= LEAK_AT and not self._looked:
            self._looked = True
            self.kept_by = kept_by(alive[-1], frame)
        return len(alive) or None


def _holds(value: Any, tensor: Any) -> bool:
    if isinstance(value, (list, tuple, collections.deque)):
        items: Any = value
    elif isinstance(value, dict):
        items = value.values()
    else:
        return False
    return any(item is tensor for _, item in zip(range(MAX_SCANNED), items))


def kept_by(tensor: Any, frame: FrameType | None) -> str | None:
    """Where ``tensor`` is kept: a container in a frame of the main thread (or the script's module)."""
    while frame is not None:
        found = _in_scope(frame.f_locals, tensor) or (
            _in_scope(frame.f_globals, tensor) if not frame.f_back else None
        )
        forget_locals(frame)
        if found is not None:
            return _where(found, frame)
        frame = frame.f_back
    return None


def _in_scope(scope: dict, tensor: Any) -> str | None:
    return next((str(name) for name, value in list(scope.items()) if _holds(value, tensor)), None)


def _where(name: str, frame: FrameType) -> str:
    code = frame.f_code
    place = f"`{name}` in {code.co_name}() ({os.path.basename(code.co_filename)}"
    adds = re.compile(rf"\b{re.escape(name)}\s*(\.(append|extend|insert)\(|\+=|\[[^\]]*\]\s*=[^=])")
    try:
        lines, first = inspect.getsourcelines(code)
    except (OSError, TypeError):
        return place + ")"
    for number, line in enumerate(lines, start=max(first, 1)):
        if adds.search(line):
            return f"{place}:{number}: {line.strip()[:120]})"
    return place + ")"
