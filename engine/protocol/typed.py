"""Parse at the boundary: a JSON document read from a run folder made into a frozen dataclass, every
field checked against its annotation, with bounds on every number and string.

The files of a run folder are written by the engine, but the ranks (the user's code) can write
every one of them: a ``summary.json`` saying ``"steps": "many"``, ``"status": 5`` or
``"duration_s": 1e308`` must end as one named problem where it is read, not as a traceback in
whatever formats it later. :func:`build` is that check, derived from the dataclass itself, so the
record and its validation never drift apart.

Kinds understood: ``int`` (not a bool; at most ``MAX_INT`` either way), ``float`` (an int or a
finite float: a diverged loss may be huge; whoever draws it copes with that), ``str`` (at
most ``MAX_STR`` characters, longer ones cut), ``bool``, ``None``, unions of those, ``tuple[X,
...]`` and ``tuple[X, Y]``, ``list[X]``, ``dict`` (kept as read: JSON already bounded in depth by
protocol/folder.py, and its readers look at what they use), ``Path``, ``Literal``, an ``Enum`` (by its
value: a state read back) and nested
dataclasses; a dataclass whose JSON is not its fields (``JSON_READER``: its classmethod
``from_json``) reads itself, and what it raises becomes Invalid. Keys the dataclass does not know
are ignored (a newer release's); a missing key takes the field's default, or is a problem when it
has none.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import math
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

MAX_INT = 1 << 62
MAX_STR = 1 << 20  # a stall's stacks of every rank can be long; short names are cut where shown
MAX_ITEMS = 100_000  # of any one list

T = TypeVar("T")


class Invalid(ValueError):
    """A document that is not the record it claims to be; ``str()`` names the field and why."""


class Word(str, enum.Enum):
    """A state that is written as its value wherever it goes: JSON, f-strings, tables. (Python
    3.11's Enum formats a str mix-in as ``Class.NAME``; ``StrEnum`` is not in 3.10.)"""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def build(cls: type[T], document: Any, where: str = "") -> T:
    """``cls`` (a dataclass) from ``document`` (a JSON object), or Invalid naming the field."""
    if not isinstance(document, dict):
        raise Invalid(f"{where or cls.__name__}: not an object")
    hints = _hints(cls)  # type: ignore[arg-type]
    values = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        name = f"{where}.{f.name}" if where else f.name
        if f.name in document:
            values[f.name] = _value(hints[f.name], document[f.name], name)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise Invalid(f"{name}: missing")
    return cls(**values)


def _value(kind: Any, value: Any, where: str) -> Any:
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        problems = []
        for option in (a for a in args if a is not type(None)):
            try:
                return _value(option, value, where)
            except Invalid as exc:
                problems.append(str(exc))
        raise Invalid(problems[0] if len(problems) == 1 else f"{where}: not any of its kinds")
    if origin is typing.Literal:
        if value in args:
            return value
        raise Invalid(f"{where}: not one of {', '.join(map(str, args))}")
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        try:
            return kind(value)
        except ValueError:
            raise Invalid(f"{where}: not one of {', '.join(str(m.value) for m in kind)}") from None
    if origin in (tuple, list):
        if not isinstance(value, list) or len(value) > MAX_ITEMS:
            raise Invalid(f"{where}: not a list (of at most {MAX_ITEMS:,} items)")
        if origin is list:
            return [_value(args[0], v, f"{where}[{i}]") for i, v in enumerate(value)]
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_value(args[0], v, f"{where}[{i}]") for i, v in enumerate(value))
        if len(value) != len(args):
            raise Invalid(f"{where}: not {len(args)} items")
        return tuple(_value(a, v, f"{where}[{i}]") for i, (a, v) in enumerate(zip(args, value)))
    if origin is dict or kind is dict:
        if not isinstance(value, dict):
            raise Invalid(f"{where}: not an object")
        return value
    if dataclasses.is_dataclass(kind) and getattr(kind, "JSON_READER", False):
        if not isinstance(value, dict):
            raise Invalid(f"{where}: not an object")
        try:
            return kind.from_json(value)  # type: ignore[union-attr]
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise Invalid(f"{where}: {type(exc).__name__}") from None
    if dataclasses.is_dataclass(kind):
        return build(kind, value, where)  # type: ignore[arg-type]
    return _scalar(kind, value, where)


def _scalar(kind: Any, value: Any, where: str) -> Any:
    if kind is type(None) or kind is None:
        if value is None:
            return None
        raise Invalid(f"{where}: not null")
    if kind is bool:
        if isinstance(value, bool):
            return value
        raise Invalid(f"{where}: not true or false")
    if kind is int:
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) <= MAX_INT:
            return value
        raise Invalid(f"{where}: not a whole number of at most {MAX_INT:.1e}")
    if kind is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool) and abs(value) <= MAX_INT:
            return float(value)
        if isinstance(value, float) and math.isfinite(value):
            return value
        raise Invalid(f"{where}: not a finite number")
    if kind is str or kind is Path:
        if isinstance(value, str):
            return kind(value[:MAX_STR])
        raise Invalid(f"{where}: not a string")
    if kind is Any or kind is object:
        return value
    raise TypeError(f"typed.build cannot check {kind!r} ({where})")  # a bug here, not in the file
