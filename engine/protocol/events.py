"""The rank event protocol: the one module that owns its format.

Every rank appends one JSON object per line to ``events/rank<N>.jsonl`` in the
run directory. Each object carries ``v`` (the schema version), ``kind``, ``rank``
and ``t`` (Unix time in seconds), plus the fields of its kind:

- ``hello``: local_rank, world_size, pid, host, device, device_uuid (CUDA only,
  else null), mode, config (an object of the rank's settings).
- ``step``: step, samples (new to the job: tensor-parallel peers and later
  pipeline stages report 0, so throughput is never counted twice), tokens,
  loss (null when this rank has none), step_s (wall seconds since the previous
  step ended), mem_bytes and mem_peak_bytes (allocator on CUDA, RSS on the CPU).
- ``done``: steps, and any summary fields the rank wants to add.
- ``error``: message, traceback.

Readers accept any line of the same major version and ignore fields they do not
know, so a newer writer can add fields without breaking an older reader.
Anything else is a :class:`MalformedEvent`, which the tailer counts and skips.

This module imports nothing beyond the standard library: rank code imports it
through the reporter, and the app process through the tailer.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

SCHEMA_VERSION = 1

# A line longer than this is not an event; the tailer drops it unread.
MAX_LINE_BYTES = 1 << 20


class MalformedEvent(ValueError):
    """A line that is not a valid event of this schema."""


@dataclass(frozen=True, slots=True)
class Hello:
    rank: int
    t: float
    local_rank: int
    world_size: int
    pid: int
    host: str
    device: str
    device_uuid: str | None
    mode: str
    config: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Step:
    rank: int
    t: float
    step: int
    samples: int
    tokens: int
    loss: float | None
    step_s: float
    mem_bytes: int | None
    mem_peak_bytes: int | None


@dataclass(frozen=True, slots=True)
class Done:
    rank: int
    t: float
    steps: int
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Error:
    rank: int
    t: float
    message: str
    traceback: str


Event = Hello | Step | Done | Error


# ---- writing (the reporter's side) ------------------------------------------------

_dumps = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode


def encode(kind: str, rank: int, t: float, fields: dict[str, Any]) -> str:
    """One event as a line of JSON, newline included.

    NaN and infinite losses are written as null plus ``"loss_nonfinite": true``,
    because JSON has no NaN and a diverged loss is exactly what a user must see.
    """
    record = {"v": SCHEMA_VERSION, "kind": kind, "rank": rank, "t": t}
    record.update(fields)
    loss = record.get("loss")
    if isinstance(loss, float) and not math.isfinite(loss):
        record["loss"] = None
        record["loss_nonfinite"] = True
    return _dumps(record) + "\n"


# ---- reading (the engine's side) --------------------------------------------------

_INT = (int,)
_NUM = (int, float)


def _get(record: dict, name: str, types: tuple, *, optional: bool = False, minimum=None):
    value = record.get(name)
    if value is None:
        if optional:
            return None
        raise MalformedEvent(f"missing field {name!r}")
    # bool is an int subclass in Python; a step number of true is still wrong.
    if isinstance(value, bool) or not isinstance(value, types):
        raise MalformedEvent(f"field {name!r} has the wrong type")
    if minimum is not None and value < minimum:
        raise MalformedEvent(f"field {name!r} is below {minimum}")
    return value


def _str(record: dict, name: str, *, optional: bool = False) -> str | None:
    value = record.get(name)
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise MalformedEvent(f"field {name!r} must be a string")
    return value


def _parse_hello(r: dict, rank: int, t: float) -> Hello:
    config = r.get("config") or {}
    if not isinstance(config, dict):
        raise MalformedEvent("field 'config' must be an object")
    return Hello(
        rank=rank,
        t=t,
        local_rank=_get(r, "local_rank", _INT, minimum=0),
        world_size=_get(r, "world_size", _INT, minimum=1),
        pid=_get(r, "pid", _INT, minimum=1),
        host=_str(r, "host"),
        device=_str(r, "device"),
        device_uuid=_str(r, "device_uuid", optional=True),
        mode=_str(r, "mode"),
        config=config,
    )


def _parse_step(r: dict, rank: int, t: float) -> Step:
    loss = _get(r, "loss", _NUM, optional=True)
    return Step(
        rank=rank,
        t=t,
        step=_get(r, "step", _INT, minimum=0),
        samples=_get(r, "samples", _INT, minimum=0),
        tokens=_get(r, "tokens", _INT, optional=True, minimum=0) or 0,
        loss=None if loss is None else float(loss),
        step_s=float(_get(r, "step_s", _NUM, minimum=0)),
        mem_bytes=_get(r, "mem_bytes", _INT, optional=True, minimum=0),
        mem_peak_bytes=_get(r, "mem_peak_bytes", _INT, optional=True, minimum=0),
    )


_DONE_FIELDS = {"v", "kind", "rank", "t", "steps"}


def _parse_done(r: dict, rank: int, t: float) -> Done:
    extra = {k: v for k, v in r.items() if k not in _DONE_FIELDS}
    return Done(rank=rank, t=t, steps=_get(r, "steps", _INT, minimum=0), extra=extra)


def _parse_error(r: dict, rank: int, t: float) -> Error:
    return Error(
        rank=rank,
        t=t,
        message=_str(r, "message"),
        traceback=_str(r, "traceback", optional=True) or "",
    )


_PARSERS = {"hello": _parse_hello, "step": _parse_step, "done": _parse_done, "error": _parse_error}
KINDS = tuple(_PARSERS)


def parse_line(line: bytes | str) -> Event:
    """Parse one line (without or with its newline) into an event.

    Raises :class:`MalformedEvent` for anything that is not a valid event:
    bad UTF-8, bad JSON, a huge line, another major version, a missing field.
    """
    if len(line) > MAX_LINE_BYTES:
        raise MalformedEvent("line too long")
    try:
        record = json.loads(line)
    except (UnicodeDecodeError, ValueError) as exc:  # JSONDecodeError is a ValueError
        raise MalformedEvent(f"not JSON: {exc}") from None
    if not isinstance(record, dict):
        raise MalformedEvent("not a JSON object")
    version = record.get("v")
    if isinstance(version, bool) or not isinstance(version, int) or version != SCHEMA_VERSION:
        raise MalformedEvent(f"unsupported schema version {version!r}")
    parser = _PARSERS.get(record.get("kind"))
    if parser is None:
        raise MalformedEvent(f"unknown kind {record.get('kind')!r}")
    rank = _get(record, "rank", _INT, minimum=0)
    t = float(_get(record, "t", _NUM, minimum=0))
    return parser(record, rank, t)
