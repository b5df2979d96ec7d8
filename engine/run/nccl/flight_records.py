"""What the ranks' flight recorders tell: why a run hung, in one sentence, and who arrives late.

PyTorch's flight recorder keeps every rank's recent collectives, numbered in the order the rank
entered them (``collective_seq_id``), with the call, the tensors' shapes and types, and when it
began. When the stall watch fires (watchdog.py), each rank's reporter dumps it from a thread of
its own (engine/rank/reporter.py; the main thread may be blocked in C code) to ``fr/rank<N>.json``.
Then, for the ranks of this node:

- the highest collective any rank entered, and the ranks that never entered it: "rank 1 never
  entered all_reduce #5 (default group, float32[4]); rank 0 has waited in it for 12 s; rank 1 is in
  load_batch at train.py:44" (its place from the stacks the watchdog took);
- ranks at the same collective number that called different things: "at collective #5 rank 0
  called all_reduce(float32[4]) and rank 1 broadcast(float32[8])".

The files are the ranks' (untrusted): read with a bound, every field checked, anything odd left out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from mgpu_tui.engine.protocol.folder import read_json
from mgpu_tui.engine.run.figures.stragglers import Straggler, stragglers_among

MAX_TRACE_BYTES = 1 << 20
MAX_TIME_NS = 10**20  # beyond the year 5000: no clock gives it
MAX_SEQ = 1 << 62
MAX_ENTRIES = 100_000  # of one rank's record (torch keeps 2,000 by default)
MAX_TENSORS = 4
DTYPES = {
    "Float": "float32",
    "Double": "float64",
    "Half": "float16",
    "BFloat16": "bfloat16",
    "Long": "int64",
    "Int": "int32",
    "Short": "int16",
    "Char": "int8",
    "Byte": "uint8",
    "Bool": "bool",
}
_FRAME = re.compile(r'File "(?P<path>[^"]+)", line (?P<line>\d+) in (?P<func>\S+)')


@dataclass(frozen=True)
class Collective:
    """One entry of a rank's flight record, parsed at the boundary: every field checked and bounded;
    what no check passes is None or left out."""

    seq: int  # collective_seq_id: the order the rank entered its collectives
    name: str  # profiling_name, "gloo:all_reduce"
    tensors: tuple[tuple[str, tuple[int, ...]], ...]  # (dtype, size) of its first inputs
    group: str  # the process group's description ("default_pg")
    created_ns: int | None  # when the rank entered it
    duration_ms: float | None  # on the GPU, where NCCL timed it


def _whole(value: object, low: int, high: int) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and low <= value <= high:
        return value
    return None


def parse_entry(entry: object) -> Collective | None:
    """A flight-recorder entry as a Collective; None when it has no whole collective number."""
    if not isinstance(entry, dict):
        return None
    seq = _whole(entry.get("collective_seq_id"), 0, MAX_SEQ)
    if seq is None:
        return None
    sizes, dtypes = entry.get("input_sizes"), entry.get("input_dtypes")
    tensors = []
    if isinstance(sizes, list) and isinstance(dtypes, list):
        for size, dtype in zip(sizes[:MAX_TENSORS], dtypes[:MAX_TENSORS]):
            if isinstance(size, list) and all(_whole(d, 0, MAX_SEQ) is not None for d in size[:8]):
                tensors.append((DTYPES.get(str(dtype)[:20], str(dtype)[:20]), tuple(size[:8])))
    group = entry.get("process_group")
    duration = entry.get("duration_ms")
    timed = isinstance(duration, (int, float)) and not isinstance(duration, bool) and 0 <= duration < 1e9
    return Collective(
        seq=seq,
        name=str(entry.get("profiling_name") or "a collective")[:60],
        tensors=tuple(tensors),
        group=str(group[1])[:40] if isinstance(group, list) and len(group) > 1 else "",
        created_ns=_whole(entry.get("time_created_ns"), 1, MAX_TIME_NS - 1),
        duration_ms=float(duration) if timed else None,  # type: ignore[arg-type]
    )


def read_trace(path: Path, root: Path | None = None) -> list[Collective]:
    """A rank's flight-recorder entries that have a whole collective number; [] if the file is
    unreadable (not a regular file, over its bound, not strict JSON, nested too deep)."""
    try:
        document = read_json(path, MAX_TRACE_BYTES, root=root)
    except (OSError, ValueError):
        return []
    entries = document.get("entries") if isinstance(document, dict) else None
    if not isinstance(entries, list):
        return []
    return [c for c in map(parse_entry, entries[:MAX_ENTRIES]) if c is not None]


def call(entry: Collective) -> str:
    """``all_reduce(float32[4])`` from a flight-recorder entry."""
    tensors = (f"{dtype}[{', '.join(map(str, size))}]" for dtype, size in entry.tensors[:4])
    return f"{entry.name.split(':')[-1]}({', '.join(tensors)})"


def _group(entry: Collective) -> str:
    return "default group" if entry.group in ("default_pg", "") else f"group {entry.group}"


# The reporter's first line of a dump: the thread that trains (the main one, unless another ran backward).
MAIN_THREAD_LINE = re.compile(r"(?:main|training) thread (0x[0-9a-f]+)\n")


def main_thread(stacks: str) -> str:
    """Of a rank's stack dump, the main thread's part: the reporter dumps from a thread of its own
    and names the main one in its first line; an older dump (from a signal) has it as the thread
    that was running ("Current thread")."""
    named = MAIN_THREAD_LINE.match(stacks)
    if named:
        at = stacks.find(f"Thread {named.group(1)} ")
        if at < 0:
            at = stacks.find(f"Current thread {named.group(1)} ")
        return stacks[at:].split("\n\n", 1)[0] if at >= 0 else ""
    return stacks.rsplit("Current thread", 1)[-1]


def where(stacks: str | None) -> str | None:
    """The rank's place, from its latest stack dump: the innermost frame of its main thread,
    preferring the program's own code to the libraries it called."""
    if not stacks:
        return None
    block = main_thread(stacks)
    frames = [m for m in _FRAME.finditer(block)]
    if not frames:
        return None
    own = [m for m in frames if "site-packages" not in m["path"] and not m["path"].startswith("<")]
    frame = (own or frames)[0]
    return f"{frame['func']} at {Path(frame['path']).name}:{frame['line']}"


def hang_verdict(
    traces: dict[int, list[Collective]], stacks: dict[int, str], now_ns: int
) -> tuple[str, int] | None:
    """(one sentence on why the ranks of ``traces`` stopped moving, the rank to blame first);
    None when the traces cannot tell."""
    last = {rank: max(entries, key=lambda e: e.seq) for rank, entries in traces.items() if entries}
    if len(last) < 2:
        return None
    top = max(e.seq for e in last.values())
    inside = {rank: e for rank, e in sorted(last.items()) if e.seq == top}
    calls = {rank: call(e) for rank, e in inside.items()}
    first = next(iter(inside))
    other = next((r for r, c in calls.items() if c != calls[first]), None)
    if other is not None:
        mismatch = f"at collective #{top} rank {first} called {calls[first]} and rank {other} {calls[other]}"
        return mismatch, other
    behind = sorted(rank for rank in last if rank not in inside)
    if not behind:
        return None  # every rank is in the same collective: the hang is inside it (a link, a peer elsewhere)
    entry = inside[first]
    names = ", ".join(map(str, behind))
    text = (
        f"rank{'s' if len(behind) > 1 else ''} {names} never entered {calls[first]} #{top} ({_group(entry)})"
    )
    created = entry.created_ns
    if created is not None and created <= now_ns:
        waiting, many = ", ".join(map(str, inside)), len(inside) > 1
        text += (
            f"; rank{'s' if many else ''} {waiting} {'have' if many else 'has'} waited in it for "
            f"{(now_ns - created) / 1e9:.0f} s"
        )
    for rank in behind:
        if place := where(stacks.get(rank)):
            text += f"; rank {rank} is in {place}"
    return text, behind[0]


def late_arrivals(traces: dict[int, list[Collective]], step_s: float | None = None) -> tuple[Straggler, ...]:
    """Stragglers from the flight recorder, for any script, under aggregate.py's straggler rule over
    the collectives every rank of this host entered. Where every such entry has its GPU duration
    (NCCL with TORCH_NCCL_ENABLE_TIMING), the durations are the evidence, since on NCCL the CPU runs
    ahead of the GPU: the straggler is the rank that waits least, its collective the shortest.
    Otherwise, when each rank entered them (one host: one clock)."""
    entered: dict[int, dict[int, float]] = {}  # collective number -> rank -> when it entered (s)
    waited: dict[int, dict[int, float]] = {}  # collective number -> rank -> minus its duration (s)
    for rank, entries in traces.items():
        for e in entries:
            if "send" in e.name or "recv" in e.name:
                continue  # point-to-point (a pipeline): one side is late by design
            if e.created_ns is not None:
                entered.setdefault(e.seq, {})[rank] = e.created_ns / 1e9
            if e.duration_ms is not None:
                waited.setdefault(e.seq, {})[rank] = -e.duration_ms / 1000
    timed = [times for times in waited.values() if len(times) == len(traces)]
    full = [times for times in entered.values() if len(times) == len(traces)]
    if timed and len(timed) >= len(full):
        return stragglers_among(timed, counted="collectives", step_s=step_s)
    return stragglers_among(full, counted="collectives", step_s=step_s)
