"""How one node hears the others of its job: each node's state, host, ranks and step as its
heartbeat in the store last said it (NodeView: what the CLI, the app and the summary show of a
node), and a failure the job's nodes caused, as a root cause (node_verdict)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from mgpu_tui.engine.protocol.causes import RootCause
from mgpu_tui.engine.protocol.events import MAX_COUNT
from mgpu_tui.engine.protocol.heartbeat import MAX_HOST, NodeRecord, NodeState
from mgpu_tui.engine.protocol.typed import MAX_ITEMS


@dataclass(frozen=True)
class Peer:
    record: NodeRecord
    beat: int
    heard_at: float  # time.monotonic() here when its beat last grew: clocks of two hosts never compare


@dataclass(frozen=True)
class NodeView:
    """One node of the job as this node sees it (the CLI, the summary and the app's rank table)."""

    node: int
    host: str | None  # None: never heard
    first_rank: int
    last_rank: int
    state: NodeState  # its own word, or LOST or MISSING as seen from here
    step: int | None
    silent_s: float | None  # since its last beat (None: this node, or never heard)
    here: bool
    steps: tuple[tuple[int, int], ...] = ()  # (rank, its last step), as the node last said
    # Its JSON (to_json) is not its fields: protocol/typed.py reads it back through from_json.
    JSON_READER: ClassVar[bool] = True

    @classmethod
    def heard(
        cls,
        node: int,
        record: NodeRecord,
        *,
        silent_s: float | None,
        here: bool,
        state: NodeState | None = None,
    ) -> NodeView:
        """A node as its record says it (``state``: as seen from here, when not its own word)."""
        return cls(
            node=node,
            host=record.host,
            first_rank=record.first_rank,
            last_rank=record.last_rank,
            state=record.state if state is None else state,
            step=record.step,
            silent_s=silent_s,
            here=here,
            steps=tuple(sorted(record.steps.items())),
        )

    @classmethod
    def unheard(cls, node: int, first_rank: int, last_rank: int, state: NodeState) -> NodeView:
        """A node never heard from (joining, or missing once the others are all in)."""
        return cls(node, None, first_rank, last_rank, state, step=None, silent_s=None, here=False)

    @property
    def ranks(self) -> str:
        first, last = self.first_rank, self.last_rank
        return str(first) if first == last else f"{first}-{last}"

    def to_json(self) -> dict:
        return {
            "node": self.node,
            "host": self.host,
            "ranks": self.ranks,
            "first_rank": self.first_rank,
            "last_rank": self.last_rank,
            "state": self.state,
            "step": self.step,
            "silent_s": None if self.silent_s is None else round(self.silent_s, 1),
            "here": self.here,
            "steps": {str(rank): step for rank, step in self.steps},
        }

    @classmethod
    def from_json(cls, data: dict) -> NodeView:
        """A node read back from a summary, every field checked (ValueError, KeyError or TypeError
        when it is not one): a rank can write its run folder's summary."""

        def whole(value: object) -> int:
            if isinstance(value, bool) or not isinstance(value, int) or abs(value) > MAX_COUNT:
                raise ValueError("not a whole number")
            return value

        def text(value: object, most: int) -> str:
            if not isinstance(value, str):
                raise TypeError("not a string")
            return value[:most]

        listed = data.get("steps") or {}
        if not isinstance(listed, dict) or len(listed) > MAX_ITEMS:
            raise TypeError("steps: not an object of ranks")
        silent = data.get("silent_s")
        if silent is not None and (isinstance(silent, bool) or not isinstance(silent, (int, float))):
            raise TypeError("silent_s: not a number")
        return cls(
            whole(data["node"]),
            None if data["host"] is None else text(data["host"], MAX_HOST),
            whole(data["first_rank"]),
            whole(data["last_rank"]),
            NodeState(data["state"]),
            None if data["step"] is None else whole(data["step"]),
            None if silent is None or not math.isfinite(silent) else float(silent),
            data["here"] is True,
            tuple((whole(int(rank)), whole(step)) for rank, step in listed.items()),
        )


LOST_HINT = (
    "that host vanished or lost its network (power, the network, a preempted VM, or its mgpu-tui "
    "was killed), and the ranks here cannot go on without its ranks: check that host, then start "
    "the job again on every node."
)


def node_verdict(message: str, hint: str | None = None, own: RootCause | None = None) -> RootCause:
    """The job's failure as another node (or the rendezvous) caused it, with this node's own beside."""
    here = f"on this node: {own.describe()}" if own else ""
    return RootCause(
        rank=None,
        exit_code=None,
        signal=None,
        message=message,
        traceback=here,
        hint=hint,
        verdict=True,
        kind="node",
    )
