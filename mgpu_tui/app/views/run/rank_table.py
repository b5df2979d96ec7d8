"""The Run view's table of ranks: a row a rank (grouped under their node when the job has several),
or for a job of NODE_TABLE_FROM nodes or more a row a node, the worst first, with the opened
node's ranks under its row.

It owns its order (``sorted_by``, the o key) and its opened node (``opened_node``, n and N):
setting either draws the table again from the figures last shown. Those keys are RankTableKeys',
which the Run view is made of.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from textual.reactive import reactive
from textual.widget import Widget

from mgpu_tui.app.views.run.node_table import NODE_TABLE_FROM, NodeRow, node_rows, node_table
from mgpu_tui.app.views.run.text import (
    NODE_RANK_STATE,
    SORTS,
    node_heading,
    rank_state,
    rank_table,
    sort_key,
)
from mgpu_tui.app.widgets.text_panel import TextPanel
from mgpu_tui.console import fmt_bytes, fmt_rank_loss, fmt_rate
from mgpu_tui.engine.nodes.view import NodeView
from mgpu_tui.engine.run.causes.watchdog import DEFAULT_MIN_S
from mgpu_tui.engine.run.figures.aggregate import RunStats
from mgpu_tui.engine.run.figures.rank_state import with_stragglers
from mgpu_tui.engine.run.figures.rank_stats import RankStats

if TYPE_CHECKING:
    from mgpu_tui.engine.records.telemetry_read import NodeMachine


@dataclass(frozen=True)
class RankContext:
    """What each rank's state is judged against, as the Run view knows the run now."""

    world_size: int = 0
    nodes: tuple[NodeView, ...] = ()
    machines: Mapping[int, NodeMachine] = field(default_factory=dict)
    stall_after: float = DEFAULT_MIN_S  # the engine's stall timeout (watchdog.py's rule)
    failed_rank: int | None = None
    finished: bool = False
    ended_ok: bool = False
    stalled: frozenset[int] | None = None  # a script's run: the ranks of its stall (rank_state)
    hung: Mapping[int, int] = field(default_factory=dict)  # the stall's ranks and their steps then


class RankTable(TextPanel):
    sorted_by: reactive[str] = reactive("rank", init=False)  # the column the ranks are sorted by (o)
    opened_node: reactive[int | None] = reactive(None, init=False)  # its ranks under its row (n, N)

    def __init__(self, **kwargs) -> None:
        super().__init__(rank_table([]), **kwargs)
        self.rank_rows: list[tuple[str, ...]] = []  # the rows last drawn, as text
        self.node_order: list[NodeRow] = []  # a large job's nodes, the worst first (node_table.py)
        self._bars = False  # the table shows where each step goes (and its legend)
        self._stats: RunStats | None = None  # the figures last shown, to draw again
        self._run = RankContext()

    def watch_sorted_by(self) -> None:
        self._draw()

    def watch_opened_node(self) -> None:
        self._draw()

    def reset(self) -> None:
        """A new run: no node opened, the rows wrapped again (a large job's node rows were cut)."""
        self.set_reactive(RankTable.opened_node, None)
        self.node_order = []
        self.styles.text_wrap, self.styles.text_overflow = "wrap", "fold"

    def show(self, stats: RunStats | None, context: RankContext) -> None:
        self._stats, self._run = stats, context
        self._draw()

    @property
    def shown(self) -> RunStats | None:
        """The figures last shown."""
        return self._stats

    def sort_next(self) -> str:
        """The next column's order; its name."""
        self.sorted_by = SORTS[(SORTS.index(self.sorted_by) + 1) % len(SORTS)]
        return self.sorted_by

    def open_next(self) -> NodeRow | None:
        """The next node's ranks under its row, in the table's order (None: no node to open)."""
        order = [row.view.node for row in self.node_order]
        if not order:
            return None
        at = (order.index(self.opened_node) + 1 if self.opened_node in order else 0) % len(order)
        row = self.node_order[at]
        self.opened_node = order[at]
        return row

    def _draw(self) -> None:
        stats, nodes = self._stats, self._run.nodes
        by_rank = {r.rank: r for r in stats.ranks} if stats else {}
        slow = {s.rank for s in stats.stragglers} if stats else set()
        now = time.time()
        if len(nodes) >= NODE_TABLE_FROM:  # a large job: a row a node, the worst first
            self._draw_nodes(by_rank, slow, now)
            return
        rows: list[tuple[str, ...]] = []
        several = len(nodes) > 1
        groups: list[tuple[NodeView | None, range]] = [
            (node, range(node.first_rank, node.last_rank + 1)) for node in nodes if several
        ]
        for node, ranks in groups or [(None, range(self._run.world_size))]:
            if node is not None:
                rows.append((node_heading(node, self._run.machines.get(node.node)),))
            # The job's ranks by their own number, or by the column o chose (within a node's group).
            order = sorted(ranks, key=lambda rank: sort_key(self.sorted_by, rank, by_rank.get(rank)))
            rows += [self._rank_cells(rank, node, by_rank, slow, now) for rank in order]
        # Same number of rows: a repaint; a new run's rows: its height changes, so a new layout.
        relayout = len(rows) != len(self.rank_rows)
        self.rank_rows = rows
        bars = {a.rank: a for a in stats.anatomy} if stats else {}
        relayout = relayout or bool(bars) != self._bars
        self._bars = bool(bars)  # (the legend's line changes the table's height)
        self.update(rank_table(rows, self.sorted_by, bars), relayout=relayout)

    def _rank_cells(
        self, rank: int, node: NodeView | None, by_rank: dict[int, RankStats], slow: set[int], now: float
    ) -> tuple[str, ...]:
        """A rank's row: its name, state, step, samples/s, loss and peak memory."""
        r = by_rank.get(rank)
        if r is None and node is not None and not node.here:  # only its node's word for it
            step = dict(node.steps).get(rank)
            return (
                f"rank {rank}",
                NODE_RANK_STATE[node.state],
                "n/a" if step is None else str(step),
                "n/a",
                "n/a",
                "n/a",
            )
        c = self._run
        state = rank_state(
            r, now, c.stall_after, c.failed_rank, c.finished, c.ended_ok, rank, c.stalled, c.hung
        )
        state = with_stragglers(state, rank, slow)
        if r is None:
            return (f"rank {rank}", state, "0", "n/a", "n/a", "n/a")
        return (
            f"rank {rank}",
            state,
            str(r.last_step),
            fmt_rate(r.samples_per_s),
            fmt_rank_loss(r.loss, r.diverged_at),
            fmt_bytes(r.mem_peak_bytes),
        )

    def _draw_nodes(self, by_rank: dict[int, RankStats], slow: set[int], now: float) -> None:
        """A row a node, the worst first (node_table.py); the opened node's ranks under its row."""
        nodes = self._run.nodes
        cells = {
            rank: self._rank_cells(rank, node, by_rank, slow, now)
            for node in nodes
            for rank in range(node.first_rank, node.last_rank + 1)
        }
        rates = {rank: r.samples_per_s for rank, r in by_rank.items()}
        self.node_order = node_rows(nodes, cells, rates, self._run.machines)
        opened: list[tuple[str, ...]] = []
        node = next((n for n in nodes if n.node == self.opened_node), None)
        if node is not None:
            ranks = range(node.first_rank, node.last_rank + 1)
            order = sorted(ranks, key=lambda rank: sort_key(self.sorted_by, rank, by_rank.get(rank)))
            opened = [cells[rank] for rank in order]
        rows = [(f"node {row.view.node}",) for row in self.node_order] + opened
        relayout = len(rows) != len(self.rank_rows)
        self.rank_rows = rows
        self.styles.text_wrap = "nowrap"  # a node's row is one line: its host cut where the view ends
        self.styles.text_overflow = "ellipsis"
        self.update(node_table(self.node_order, self.opened_node, opened), relayout=relayout)


class RankTableKeys(Widget):
    """The table's keys, on the view that shows it (the Run view): o sorts it by its next column,
    n opens the next node (the worst first), N closes it."""

    @property
    def rank_table(self) -> RankTable:
        return self.query_one(RankTable)

    def action_sort_ranks(self) -> None:
        """o: the rank table sorted by its next column (rank, samples/s, step, loss, peak memory)."""
        self.app.notify(f"Ranks sorted by {self.rank_table.sort_next()}", timeout=2)

    def action_open_node(self) -> None:
        """n: the next node's ranks under its row, in the table's order (the worst node first)."""
        row = self.rank_table.open_next()
        if row is None:
            self.app.notify(
                "A job over several nodes lists its nodes here; this one has none to open.", title="n"
            )
            return
        self.app.notify(f"Node {row.view.node} opened: ranks {row.view.ranks} (N closes it)", timeout=2)

    def action_close_node(self) -> None:
        """N: the opened node closes."""
        self.rank_table.opened_node = None
