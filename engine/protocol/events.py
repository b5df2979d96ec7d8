"""The rank event protocol: the one module that owns its format.

Every rank appends one JSON object a line to its event file, ``events/rank<N>.jsonl`` (a long run's later
lines in segments beside it: rank/event_files.py; a trainer, a process of a command that trains with no
process group, to ``events/trainer<PID>.jsonl``, as rank 0 of a world of one, each hello there beginning a
training of its own: run/figures/trainers.py). Each carries ``v`` (the schema version), ``kind``, ``rank`` and
``t`` (Unix time in seconds), plus the fields of its kind:

- ``hello``: local_rank, world_size, pid, host, device, device_uuid (CUDA only, else null), mode, config (its
  settings; a trainer's names its process: ``process``), stacks (it answers requests/stacks).
- ``step``: :class:`Step`'s fields: step, samples (new to the job: tensor-parallel peers and later pipeline
  stages report 0, so throughput is never counted twice), tokens, loss (null where this rank has none), step_s
  (wall seconds since the previous step ended), mem_bytes and mem_peak_bytes (the allocator's on CUDA, RSS on
  the CPU), and the optional ones each said beside it (parts: rank/watch/step_clock.py; flops:
  rank/watch/flops/; memory_parts: rank/watch/memory/).
- ``done``: steps, and any summary fields the rank wants to add. ``digest``: ``n`` steps in one line, the
  fields of :class:`Digest` (a long run's digest file).
- ``error``: message, traceback; optionally type, whole_message and out_of_memory (:class:`Error`).
  ``about``: what a script used, learnt once it ran (rank/watch/script_watch.py): :class:`About`'s fields.
- ``beat``: the rank's main thread moved since its last event, though no step ended (an evaluation, a
  checkpoint, a compile): where (``function at file.py:12``, or null). A rank that neither steps nor beats has
  not moved; that is the stall watch's evidence (watchdog.py).

Readers accept any line of the same major version and ignore fields they do not know (a newer writer adds
fields without breaking an older reader). Anything else is a :class:`MalformedEvent`, which the tailer counts
and skips: a field of the wrong type, a number out of range (a step of 2**63, a pid no kernel gives, a time of
infinity), a string longer than a field can be. Nothing here trusts a rank; which events fit the job (their
rank, their file) is the ingest's to check. It imports the standard library and protocol/typed.py only: the
ranks import it, and the app.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mgpu_tui.engine.protocol.typed import Invalid, build

SCHEMA_VERSION = 1

MAX_LINE_BYTES = 1 << 20  # a longer line is not an event: the tailer drops it unread
# What a number or a string may be: enough for any real job, never an overflow downstream (arrays, sums).
MAX_RANK = 1 << 20  # ranks, local ranks, world size
MAX_PID = 1 << 22  # Linux's largest pid_max
MAX_COUNT = 1 << 48  # steps, samples, tokens
MAX_BYTES = 1 << 60  # memory
MAX_FLOPS = 1 << 80  # a step's FLOPs on one rank (1.2e24: far beyond any step of today)
MAX_SECONDS = 1e9  # a step's seconds
MAX_TIME = 1e11  # Unix time: beyond the year 5000
MAX_NAME = 1024  # host, device, mode, a GPU's UUID
MAX_TEXT = 256 * 1024  # an error's message and traceback


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
    stacks: bool = False  # it answers a stack request (requests/stacks) with its stacks


# The parts a step's time is taken apart into (engine/rank/watch/step_clock.py says how each is measured).
STEP_PARTS = ("data", "forward", "backward", "comm", "optimizer", "host")
MEMORY_PARTS = ("parameters", "buffers", "gradients", "optimizer")


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
    data_s: float | None = None  # of step_s, the time before this rank's compute (its batch): when known
    state_bytes: int | None = None  # its parameters', gradients' and optimizer state's (local shards)
    tensor_peak_bytes: int | None = None  # the peak of its live tensors so far (CPU demos: MemTracker)
    loss_nonfinite: bool = False  # its loss was NaN or infinite (written as null: JSON has neither)
    parts: tuple[float, ...] | None = None  # seconds in each of STEP_PARTS, where it took its step apart
    flops: int | None = None  # the step's floating-point operations on this rank, where counted
    recomputed_flops: int | None = None  # what it ran again to recompute activations (not in flops)
    observed: bool = False  # it ran under the FLOP count, which slowed it: not a step of the figures
    memory_parts: tuple[int, ...] | None = None  # bytes of each of MEMORY_PARTS as the step ended
    activations_bytes: int | None = None  # an observed step's tensors saved for backward
    kept_graphs: int | None = None  # earlier steps' losses still alive with their graphs (a leak)
    kept_by: str | None = None  # what keeps them, where the rank found it


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
    type: str | None = None  # the exception's qualified name, where the rank's own bootstrap caught it
    whole_message: str | None = None  # all of its message, where ``message`` is the first line
    out_of_memory: dict | None = None  # an out-of-memory's figures, as the rank said them (unchecked)


@dataclass(frozen=True, slots=True)
class About:
    rank: int
    t: float
    device: str
    device_uuid: str | None
    backend: str | None  # the process group's ("gloo", "nccl"); None when the script made none
    batch: int | None = None  # samples a step, as they entered the root DDP or FSDP module
    batch_source: str | None = None  # where they were counted
    loader_workers: int | None = None  # its training DataLoader's worker processes, where it has one
    precision: str | None = None  # what its matrix multiplies run in (fp32, tf32, bf16, fp16, fp8)
    device_name: str | None = None  # the GPU's name, as torch gives it
    flops_note: str | None = None  # why its steps' FLOPs are not counted


@dataclass(frozen=True, slots=True)
class Beat:
    rank: int
    t: float
    where: str | None


@dataclass(frozen=True, slots=True)
class Digest:
    rank: int
    t: float  # its last step's
    first: int
    last: int
    n: int
    samples: int
    tokens: int
    step_s: tuple[float, float, float]  # sum, min, max
    hist: tuple[tuple[int, int], ...]  # (step_bin, steps), the bins in order
    # Of its steps with a loss: the sum of loss x samples, their samples, the sum, the count, min, max.
    loss: tuple[float, float, float, int, float, float] | None
    flops: tuple[float, int] = (0.0, 0)  # sum, steps that counted it
    mem_peak_bytes: int | None = None
    diverged_at: int | None = None  # the first step whose loss was NaN or infinite
    recomputed: float = 0.0  # Step.recomputed_flops of its steps not observed (Step.observed)
    # Where a step was observed, the others' steps, samples, tokens, seconds, FLOPs, steps counting them.
    steady: tuple[int, int, int, float, float, int] | None = None


Event = Hello | Step | Done | Error | About | Beat | Digest

BIN_ZERO, BIN_TOP = -1200, 1100  # a digest's hist: its bins' range (protocol/long_run/digest.py)


# ---- writing (the reporter's side) ------------------------------------------------

# What JSON cannot say (in a script's config or done fields) is written as text: the reporter never raises.
_dumps = json.JSONEncoder(separators=(",", ":"), allow_nan=False, default=repr).encode


def _finite(value: Any) -> Any:
    """The value with every NaN or infinity (at any depth) written as text: JSON has none."""
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)  # "nan", "inf", "-inf"
    if isinstance(value, dict):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def encode(kind: str, rank: int, t: float, fields: dict[str, Any]) -> str:
    """One event as a line of JSON, newline included. A NaN or infinite loss is written as null plus
    ``"loss_nonfinite": true``: JSON has no NaN, and a diverged loss is what a user must see."""
    record = {"v": SCHEMA_VERSION, "kind": kind, "rank": rank, "t": t, **fields}
    loss = record.get("loss")
    if isinstance(loss, float) and not math.isfinite(loss):
        record["loss"], record["loss_nonfinite"] = None, True
    # The walk (a copy of every value) only where some value needs it: a step's are plain numbers.
    return _dumps(record if _plain(record) else _finite(record)) + "\n"


def _plain(value: Any) -> bool:
    """Whether JSON says it as it is: a finite float, a plain scalar, or an object of such."""
    kind = type(value)
    if kind is float:
        return math.isfinite(value)
    if kind is dict:
        return all(type(k) is str and _plain(v) for k, v in value.items())
    return kind in (int, str, bool, type(None))


# ---- reading (the engine's side) --------------------------------------------------

_INT, _NUM = (int,), (int, float)


def _get(record: dict, name: str, types: tuple, *, optional: bool = False, minimum=None, maximum=None):
    value = record.get(name)
    if value is None:
        if optional:
            return None
        raise MalformedEvent(f"missing field {name!r}")
    if isinstance(value, bool) or not isinstance(value, types):  # (a bool is an int: a step of true is wrong)
        raise MalformedEvent(f"field {name!r} has the wrong type")
    if isinstance(value, float) and not math.isfinite(value):  # json reads NaN and Infinity
        raise MalformedEvent(f"field {name!r} is not a finite number")
    if minimum is not None and value < minimum:
        raise MalformedEvent(f"field {name!r} is below {minimum}")
    if maximum is not None and value > maximum:
        raise MalformedEvent(f"field {name!r} is above {maximum}")
    return value


def _str(record: dict, name: str, *, optional: bool = False, limit: int = MAX_NAME) -> Any:
    value = record.get(name)
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise MalformedEvent(f"field {name!r} must be a string")
    if len(value) > limit:
        raise MalformedEvent(f"field {name!r} is longer than {limit} characters")
    return value


def _parse_hello(r: dict, rank: int, t: float) -> Hello:
    config = r.get("config") or {}
    if not isinstance(config, dict):
        raise MalformedEvent("field 'config' must be an object")
    return Hello(
        rank=rank,
        t=t,
        local_rank=_get(r, "local_rank", _INT, minimum=0, maximum=MAX_RANK),
        world_size=_get(r, "world_size", _INT, minimum=1, maximum=MAX_RANK),
        pid=_get(r, "pid", _INT, minimum=1, maximum=MAX_PID),
        host=_str(r, "host"),
        device=_str(r, "device"),
        device_uuid=_str(r, "device_uuid", optional=True),
        mode=_str(r, "mode"),
        config=config,
        stacks=r.get("stacks") is True,
    )


def _parse_step(r: dict, rank: int, t: float) -> Step:
    loss = r.get("loss")
    if loss is not None and (isinstance(loss, bool) or not isinstance(loss, _NUM)):
        raise MalformedEvent("field 'loss' has the wrong type")
    if isinstance(loss, int) and abs(loss) > MAX_COUNT:  # 10**400 is valid JSON, and no float
        raise MalformedEvent("field 'loss' is out of range")
    parts = _each(r.get("parts"), "parts", STEP_PARTS, _NUM, MAX_SECONDS)  # seconds in each
    return Step(
        rank=rank,
        t=t,
        step=_get(r, "step", _INT, minimum=0, maximum=MAX_COUNT),
        samples=_get(r, "samples", _INT, minimum=0, maximum=MAX_COUNT),
        tokens=_get(r, "tokens", _INT, optional=True, minimum=0, maximum=MAX_COUNT) or 0,
        # A diverged loss (NaN, infinite) is a true value, and what a user most needs to see.
        loss=None if loss is None else float(loss),
        step_s=float(_get(r, "step_s", _NUM, minimum=0, maximum=MAX_SECONDS)),
        mem_bytes=_get(r, "mem_bytes", _INT, optional=True, minimum=0, maximum=MAX_BYTES),
        mem_peak_bytes=_get(r, "mem_peak_bytes", _INT, optional=True, minimum=0, maximum=MAX_BYTES),
        data_s=_get(r, "data_s", _NUM, optional=True, minimum=0, maximum=MAX_SECONDS),
        state_bytes=_get(r, "state_bytes", _INT, optional=True, minimum=0, maximum=MAX_BYTES),
        tensor_peak_bytes=_get(r, "tensor_peak_bytes", _INT, optional=True, minimum=0, maximum=MAX_BYTES),
        loss_nonfinite=r.get("loss_nonfinite") is True and loss is None,
        parts=None if parts is None else tuple(map(float, parts)),
        flops=_get(r, "flops", _INT, optional=True, minimum=0, maximum=MAX_FLOPS),
        recomputed_flops=_get(r, "recomputed_flops", _INT, optional=True, minimum=0, maximum=MAX_FLOPS),
        observed=r.get("observed") is True,
        **(_memory_fields(r) if "memory_parts" in r or "kept_graphs" in r else {}),  # (a backlog: cheap)
    )


def _memory_fields(r: dict) -> dict[str, Any]:
    return {
        "memory_parts": _each(r.get("memory_parts"), "memory_parts", MEMORY_PARTS, _INT, MAX_BYTES),
        "activations_bytes": _get(r, "activations_bytes", _INT, optional=True, minimum=0, maximum=MAX_BYTES),
        "kept_graphs": _get(r, "kept_graphs", _INT, optional=True, minimum=0, maximum=MAX_COUNT),
        "kept_by": _str(r, "kept_by", optional=True, limit=MAX_TEXT),
    }


def _each(value: object, name: str, names: tuple[str, ...], types: tuple, maximum: float) -> tuple | None:
    """An object with a number for each of ``names`` (others ignored; a step's parts, its memory's)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise MalformedEvent(f"field {name!r} must be an object")
    return tuple(_get(value, n, types, minimum=0, maximum=maximum) for n in names)


_DONE_FIELDS = {"v", "kind", "rank", "t", "steps", "seg"}  # seg: the digest file's


def _parse_done(r: dict, rank: int, t: float) -> Done:
    extra = {k: v for k, v in r.items() if k not in _DONE_FIELDS}
    return Done(rank=rank, t=t, steps=_get(r, "steps", _INT, minimum=0, maximum=MAX_COUNT), extra=extra)


def _parse_error(r: dict, rank: int, t: float) -> Error:
    return Error(
        rank=rank,
        t=t,
        message=_str(r, "message", limit=MAX_TEXT),
        traceback=_str(r, "traceback", optional=True, limit=MAX_TEXT) or "",
        type=_str(r, "type", optional=True),
        whole_message=_str(r, "whole_message", optional=True, limit=MAX_TEXT),
        out_of_memory=r["out_of_memory"] if isinstance(r.get("out_of_memory"), dict) else None,
    )


def _parse_about(r: dict, rank: int, t: float) -> About:
    return About(
        rank=rank,
        t=t,
        device=_str(r, "device"),
        device_uuid=_str(r, "device_uuid", optional=True),
        backend=_str(r, "backend", optional=True),
        batch=_get(r, "batch", _INT, optional=True, minimum=1, maximum=MAX_COUNT),
        batch_source=_str(r, "batch_source", optional=True),
        loader_workers=_get(r, "loader_workers", _INT, optional=True, minimum=0, maximum=MAX_COUNT),
        precision=_str(r, "precision", optional=True),
        device_name=_str(r, "device_name", optional=True),
        flops_note=_str(r, "flops_note", optional=True, limit=MAX_TEXT),
    )


def _parse_digest(r: dict, rank: int, t: float) -> Digest:
    from mgpu_tui.engine.protocol.long_run.digest import within  # (it imports this module's bounds)

    try:  # its shape from its annotations (finite numbers, at most 2**62), then each within its range
        d = build(Digest, {**r, "rank": rank, "t": t})
    except Invalid as exc:
        raise MalformedEvent(f"digest: {exc}") from None
    if not within(d):
        raise MalformedEvent("digest: a figure outside its range")
    return d


_PARSERS: dict[str, Callable[[dict, int, float], Event]] = {
    "hello": _parse_hello,
    "step": _parse_step,
    "done": _parse_done,
    "error": _parse_error,
    "about": _parse_about,
    "beat": lambda r, rank, t: Beat(rank=rank, t=t, where=_str(r, "where", optional=True)),
    "digest": _parse_digest,
}
KINDS = tuple(_PARSERS)


def parse_line(line: bytes | str) -> Event:
    """Parse one line (without or with its newline) into an event. Raises :class:`MalformedEvent` for
    anything that is not a valid event: bad UTF-8, bad JSON, a huge line, another major version, a
    missing field."""
    if len(line) > MAX_LINE_BYTES:
        raise MalformedEvent("line too long")
    try:
        record = json.loads(line)
    except (UnicodeDecodeError, ValueError) as exc:  # JSONDecodeError is a ValueError
        raise MalformedEvent(f"not JSON: {exc}") from None
    except RecursionError:  # "[[[[..." nested deeper than the parser's stack: found by the fuzz test
        raise MalformedEvent("not JSON: nested too deep") from None
    if not isinstance(record, dict):
        raise MalformedEvent("not a JSON object")
    version = record.get("v")
    if isinstance(version, bool) or not isinstance(version, int) or version != SCHEMA_VERSION:
        raise MalformedEvent(f"unsupported schema version {version!r}")
    kind = record.get("kind")
    parser = _PARSERS.get(kind) if isinstance(kind, str) else None  # a list is no key: found by fuzzing
    if parser is None:
        raise MalformedEvent(f"unknown kind {str(kind)[:40]!r}")
    rank = _get(record, "rank", _INT, minimum=0, maximum=MAX_RANK)
    t = float(_get(record, "t", _NUM, minimum=0, maximum=MAX_TIME))
    try:
        return parser(record, rank, t)
    except (OverflowError, TypeError, ValueError) as exc:  # MalformedEvent is a ValueError too
        if isinstance(exc, MalformedEvent):
            raise
        # A check above missed a way to be wrong: still one malformed line, never the engine's end.
        raise MalformedEvent(f"{kind}: {type(exc).__name__}") from None
