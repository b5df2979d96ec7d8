"""What the nodes of one job say to each other: one record per node in the rendezvous store.

Each node's engine writes its record (through its link, rank/node_link.py) as
``{"beat": N, "record": {...}}``; ``beat`` grows every second while the node lives, so a
node whose beat stops growing has stopped answering, whatever its record says. The record:

- ``host`` (its hostname), ``node`` (its node rank), ``ranks`` ([first, last] global rank);
- ``state``: joining, running, ok, failed or interrupted;
- ``steps``: {global rank: the last step it reported};
- ``failure`` (once failed): ``rank``, ``headline``, ``hint``, and ``secondary`` (true when this
  node only saw another's failure: a lost peer).

A record comes from another machine, or from anyone who can reach the store (it has no
authentication): :func:`parse_peer` bounds and checks every field, and returns None for
anything else. Texts are kept as plain text, their control characters replaced.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Literal, overload

from mgpu_tui.engine.protocol.text import plain_line
from mgpu_tui.engine.protocol.typed import Word


class NodeState(Word):
    """A node's state: what its own record says (the first five), or what another node concludes of
    it (the last two: it never writes them of itself)."""

    JOINING = "joining"
    RUNNING = "running"
    OK = "ok"
    FAILED = "failed"
    INTERRUPTED = "interrupted"
    LOST = "lost"  # its beat stopped growing before it said how it ended
    MISSING = "missing"  # the job is under way and it never wrote a record

    @property
    def final(self) -> bool:
        return self in FINAL_STATES


STATES = tuple(NodeState)[:5]  # what a node may say of itself
FINAL_STATES = (NodeState.OK, NodeState.FAILED, NodeState.INTERRUPTED)
MAX_HOST = 64
MAX_TEXT = 600
MAX_RANKS_SHOWN = 256  # steps of at most this many ranks per node
MAX_RANK = 1 << 20
MAX_STEP = 1 << 48


def plain(text: str, limit: int) -> str:
    """A peer's text as one plain line (the one sink, protocol/text.py), at most ``limit`` characters."""
    return plain_line(text, limit)


@dataclass(frozen=True)
class NodeFailure:
    rank: int | None
    headline: str
    hint: str | None
    secondary: bool  # this node only saw another's failure


@dataclass(frozen=True)
class NodeRecord:
    node: int
    host: str
    first_rank: int
    last_rank: int
    state: NodeState
    steps: dict[int, int] = field(default_factory=dict)
    failure: NodeFailure | None = None

    @property
    def step(self) -> int | None:
        """The last step every rank of the node reached, once all have reported one."""
        return min(self.steps.values()) if self.steps else None

    @property
    def final(self) -> bool:
        return self.state.final

    def ranks_text(self) -> str:
        first, last = self.first_rank, self.last_rank
        return str(first) if first == last else f"{first}-{last}"

    def to_json(self) -> dict:
        record = asdict(self)
        record["ranks"] = [record.pop("first_rank"), record.pop("last_rank")]
        record["steps"] = {str(rank): step for rank, step in self.steps.items()}
        return record


def _int(value, low: int, high: int) -> int:
    if type(value) is not int or not low <= value <= high:
        raise ValueError(value)
    return value


@overload
def _text(value: object, limit: int, *, optional: Literal[False] = False) -> str: ...
@overload
def _text(value: object, limit: int, *, optional: Literal[True]) -> str | None: ...
def _text(value: object, limit: int, *, optional: bool = False) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise ValueError(value)
    return plain(value, limit)


def parse_record(data: dict, *, nnodes: int, world_size: int) -> NodeRecord:
    """A record as the engine wrote it (ValueError when it is not one of this job's)."""
    node = _int(data["node"], 0, nnodes - 1)
    first, last = (_int(r, 0, world_size - 1) for r in data["ranks"])
    if first > last:
        raise ValueError("ranks")
    if data["state"] not in STATES:
        raise ValueError(data["state"])
    state = NodeState(data["state"])
    steps_in = data.get("steps") or {}
    if not isinstance(steps_in, dict) or len(steps_in) > MAX_RANKS_SHOWN:
        raise ValueError("steps")
    steps = {}
    for rank, step in steps_in.items():
        if not (isinstance(rank, str) and rank.isdigit() and first <= int(rank) <= last):
            raise ValueError("steps")  # a rank that is not the node's
        steps[int(rank)] = _int(step, 0, MAX_STEP)
    failure = None
    if (f := data.get("failure")) is not None:
        failure = NodeFailure(
            rank=None if f.get("rank") is None else _int(f["rank"], 0, world_size - 1),
            headline=_text(f["headline"], MAX_TEXT),
            hint=_text(f.get("hint"), MAX_TEXT, optional=True),
            secondary=bool(f.get("secondary")),
        )
    return NodeRecord(node, _text(data["host"], MAX_HOST), first, last, state, steps, failure)


def parse_peer(raw: str | None, *, node: int, nnodes: int, world_size: int) -> tuple[int, NodeRecord] | None:
    """(beat, record) from a peer's raw value in the store, or None when it is not one of node ``node``."""
    if raw is None:
        return None
    try:
        data = json.loads(raw)
        beat = _int(data["beat"], 0, MAX_STEP)
        record = parse_record(data["record"], nnodes=nnodes, world_size=world_size)
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return None
    return (beat, record) if record.node == node else None
