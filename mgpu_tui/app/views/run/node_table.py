"""The Run view's table of a job over many nodes (issue 45): one row a node, the worst first, and the
opened node's ranks under its row (``n`` opens the next node, ``N`` closes it).

A node's row: its ranks, how many are in each state (the worst state first), its step range, its
samples/s (its ranks' sum), the rank most to look at and why, and its host as its own telemetry last
said. The worst node is the one whose worst rank is in the worst state (failed or lost, then
stalled or missing, a peer gone, silent, slow, stopped, starting), then the one with more such
ranks, then the one furthest behind: a job of 1,024 ranks shows on its first line which one is not
fine. Fewer than NODE_TABLE_FROM nodes keep each rank under its node's heading (run.py).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rich.text import Text

from mgpu_tui.app.views.run.text import STATE_STYLE, RankState, rank_line
from mgpu_tui.console import fmt_rate, plain
from mgpu_tui.engine.nodes.view import NodeView

if TYPE_CHECKING:
    from mgpu_tui.engine.records.telemetry_read import NodeMachine

NODE_TABLE_FROM = 4  # nodes from which the Run view lists nodes rather than every rank
# How much a rank in each state asks to be looked at: the lower, the sooner.
CONCERN = {
    RankState.FAILED: 0,
    RankState.LOST: 0,
    RankState.STALLED: 1,
    RankState.MISSING: 1,
    RankState.NO_PEER: 2,
    RankState.SILENT: 3,
    RankState.SLOW: 4,
    RankState.STOPPED: 5,
    RankState.STARTING: 6,
    RankState.RUNNING: 7,
    RankState.DONE: 8,
}
FINE = CONCERN[RankState.RUNNING]
# Within 80 columns (the host after them, cut where the terminal ends).
NODE_COLUMNS = (("node", 6), ("ranks", 9), ("state", 20), ("step", 9), ("samples/s", 10), ("look at", 19))


@dataclass(frozen=True)
class NodeRow:
    view: NodeView
    states: tuple[tuple[RankState, int], ...]  # how many ranks in each state, the worst first
    steps: tuple[int, int] | None  # its ranks' lowest and highest step
    samples_per_s: float | None
    worst: tuple[int, RankState] | None  # the rank to look at first, where one is not fine
    machine: NodeMachine | None = None

    @property
    def order(self) -> tuple:
        """Its place in the table: the worst rank's concern, the ranks of concern, the lowest step."""
        concern = min((CONCERN[state] for state, _ in self.states), default=FINE)
        troubled = sum(n for state, n in self.states if CONCERN[state] < FINE)
        return (concern, -troubled, self.steps[0] if self.steps else -1, self.view.node)


def node_rows(
    nodes: Sequence[NodeView],
    cells: Mapping[int, tuple[str, ...]],
    rates: Mapping[int, float | None],
    machines: Mapping[int, NodeMachine] | None = None,
) -> list[NodeRow]:
    """Each node's row, the worst first. ``cells``: each rank's row as the rank table has it (its
    state second, its step third); ``rates``: each rank's samples/s where it has one."""
    rows = []
    for view in nodes:
        ranks = range(view.first_rank, view.last_rank + 1)
        states = Counter(RankState(cells[r][1]) for r in ranks if r in cells)
        steps = [int(cells[r][2]) for r in ranks if r in cells and cells[r][2].isdigit()]
        known = [rate for r in ranks if (rate := rates.get(r)) is not None]
        worst = min(
            (r for r in ranks if r in cells),
            key=lambda r: (
                CONCERN[RankState(cells[r][1])],
                int(cells[r][2]) if cells[r][2].isdigit() else -1,
                r,
            ),
            default=None,
        )
        rows.append(
            NodeRow(
                view=view,
                states=tuple(sorted(states.items(), key=lambda kv: (CONCERN[kv[0]], kv[0].value))),
                steps=(min(steps), max(steps)) if steps else None,
                samples_per_s=sum(known) if known else None,
                worst=None
                if worst is None or CONCERN[RankState(cells[worst][1])] >= FINE
                else (worst, RankState(cells[worst][1])),
                machine=(machines or {}).get(view.node),
            )
        )
    return sorted(rows, key=lambda row: row.order)


def node_table(rows: Sequence[NodeRow], opened: int | None, opened_ranks: Sequence[tuple[str, ...]]) -> Text:
    """The nodes' rows under a bold header; the opened node's ranks (rank-table rows) under its own."""
    text = Text(no_wrap=True, overflow="crop")
    for i, (name, width) in enumerate(NODE_COLUMNS):
        text.append((name.ljust(width) if i in (0, 1, 2, 5) else name.rjust(width)) + " ", style="bold")
    text.append("host", style="bold")
    for row in rows:
        text.append("\n")
        _node_line(text, row, opened == row.view.node)
        if opened == row.view.node:
            for cells in opened_ranks:
                text.append("\n  ")
                text.append_text(rank_line(cells))
    return text


def _node_line(text: Text, row: NodeRow, opened: bool) -> None:
    view = row.view
    mark = "▾" if opened else "▸"
    text.append(f"{mark} {view.node}".ljust(6) + " ", style="bold cyan")
    text.append(view.ranks.ljust(9) + " ")
    said = ", ".join(f"{n} {state.value}" for state, n in row.states) or view.state.value
    worst_state = row.states[0][0] if row.states else RankState.STARTING
    text.append(plain(said)[:20].ljust(20) + " ", style=STATE_STYLE[worst_state])
    steps = (
        "n/a"
        if row.steps is None
        else (str(row.steps[0]) if row.steps[0] == row.steps[1] else f"{row.steps[0]}-{row.steps[1]}")
    )
    text.append(steps.rjust(9) + " ")
    text.append(fmt_rate(row.samples_per_s).rjust(10) + " ")
    look = "" if row.worst is None else f"rank {row.worst[0]} {row.worst[1].value}"
    text.append(look[:19].ljust(19) + " ", style=STATE_STYLE[row.worst[1]] if row.worst else "")
    host = view.host or "not heard from"
    if row.machine is not None and row.machine.gpu_util_percent is not None:
        host += f" · GPUs {row.machine.gpu_util_percent:.0f}%"
    text.append(plain(host))  # another machine's words: text only
