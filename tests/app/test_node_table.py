"""Issue 45: a job of 128 nodes of 8 ranks (1,024 ranks) on one screen: a row a node, the worst
first, one key opening it; and a job of fewer nodes as before. The figures go through the engine's
own Aggregator, as a followed job's do; the snapshots are pictures to look at
(`pytest tests/app/test_node_table.py --snapshot-update`, then tests/app/__snapshots__/)."""

import time
from pathlib import Path

import pytest
from test_view_snapshots import SIZES, recorded
from waiting import settled

from mgpu_tui.app import create_app
from mgpu_tui.app.views.run.node_table import node_rows
from mgpu_tui.app.views.run.view import RunView
from mgpu_tui.engine.launch.spec import LaunchSpec, resolve
from mgpu_tui.engine.nodes.view import NodeView
from mgpu_tui.engine.protocol.events import Hello, Step
from mgpu_tui.engine.protocol.heartbeat import NodeState
from mgpu_tui.engine.run.figures.aggregate import Aggregator

STALLED, SLOW_NODE = 301, 90  # rank 301 (node 37) stopped at step 120; node 90 is behind


def pinned_job(view: RunView, nodes: int = 128, per: int = 8) -> None:
    """A job of ``nodes`` nodes of ``per`` ranks at step 200, followed from the folder they share:
    every rank's events, rank STALLED silent since step 120, node SLOW_NODE's ranks at step 180."""
    _, _, host = recorded(0)
    spec = LaunchSpec(
        "ddp", nproc=per, nnodes=nodes, rdzv_endpoint="127.0.0.1:29500", steps=1000, device="cpu"
    )
    view.started(spec, resolve(spec, host), "runs/20261127T010000Z-ddp")
    now = time.time()
    events = Aggregator()
    for rank in range(nodes * per):
        events.add(
            Hello(rank, now - 60, rank % per, nodes * per, 5000 + rank, f"n{rank // per}", "cpu", None, "ddp")
        )
        last = 120 if rank == STALLED else 180 if rank // per == SLOW_NODE else 200
        for step in range(last - 9, last + 1):  # the latest steps each rank said
            t = (now - 100) if rank == STALLED else now - (last - step) * 0.05
            events.add(Step(rank, t, step, 16, 0, 2.0 - step / 1000, 0.05, 300 << 20, 320 << 20))
    views = tuple(
        NodeView(n, f"gpu-node-{n:03d}", n * per, n * per + per - 1, NodeState.RUNNING, 200, 0.5, n == 0)
        for n in range(nodes)
    )
    view.show(events.stats(), ([], [], []), 30.0, nodes=views)


def an_app():
    """The app on a box without GPUs, every figure pinned (test_view_snapshots.py's recorded box)."""
    snapshots, topology, host = recorded(0)
    return create_app(telemetry=snapshots, topology=topology, host=host, run_root=Path("no-runs-here"))


async def shown_job(app, pilot) -> RunView:
    """The Run view with the pinned job of 128 nodes in it."""
    await pilot.press("r")
    view = app.query_one(RunView)
    pinned_job(view)
    return view


@pytest.mark.parametrize("size", list(SIZES))
def test_a_job_of_128_nodes_shows_a_row_a_node_the_worst_first_and_one_key_opens_it(snap_compare, size):
    app = an_app()

    async def job(pilot):
        await shown_job(app, pilot)
        await settled(pilot)
        await pilot.press("n")  # the worst node opens
        await settled(pilot)

    assert snap_compare(app, terminal_size=SIZES[size], run_before=job)


async def test_the_worst_node_is_first_and_n_opens_the_next_in_that_order():
    app = an_app()
    async with app.run_test(size=(160, 50)) as pilot:
        view = await shown_job(app, pilot)
        await pilot.pause(0.1)
        first, second = view.rank_table.node_order[:2]
        assert (first.view.node, first.worst) == (37, (STALLED, "stalled"))
        assert first.states == (("stalled", 1), ("running", 7))
        assert second.view.node == SLOW_NODE and second.steps == (180, 180)  # the furthest behind next
        assert len(view.rank_table.rank_rows) == 128  # a row a node, no rank yet
        await pilot.press("n")
        assert view.rank_table.opened_node == 37 and len(view.rank_table.rank_rows) == 128 + 8
        await pilot.press("n")
        assert view.rank_table.opened_node == SLOW_NODE
        await pilot.press("N")
        assert view.rank_table.opened_node is None and len(view.rank_table.rank_rows) == 128


def test_node_rows_count_each_state_and_name_the_rank_to_look_at():
    views = [NodeView(n, f"h{n}", 2 * n, 2 * n + 1, NodeState.RUNNING, 5, None, False) for n in range(3)]
    cells = {
        0: ("rank 0", "running", "5", "1", "1", "1"),
        1: ("rank 1", "running", "5", "1", "1", "1"),
        2: ("rank 2", "failed", "3", "1", "1", "1"),
        3: ("rank 3", "no peer", "3", "1", "1", "1"),
        4: ("rank 4", "running", "4", "1", "1", "1"),
        5: ("rank 5", "slow", "4", "1", "1", "1"),
    }
    rows = node_rows(views, cells, {0: 10.0, 1: 12.0, 4: 9.0})
    assert [r.view.node for r in rows] == [1, 2, 0]
    assert rows[0].worst == (2, "failed") and rows[0].states == (("failed", 1), ("no peer", 1))
    assert rows[1].worst == (5, "slow") and rows[1].samples_per_s == 9.0 and rows[1].steps == (4, 4)
    assert rows[2].worst is None and rows[2].samples_per_s == 22.0


async def test_the_logs_filter_offers_each_node_and_shows_its_ranks_lines():
    from textual.widgets import Select

    from mgpu_tui.app.widgets.log_view import LogPane, LogView

    app = an_app()
    async with app.run_test(size=(160, 50)) as pilot:
        view = await shown_job(app, pilot)
        view.add_log_lines(
            [(rank, "stdout", f"loss at rank {rank}") for rank in (0, 295, 296, 301, 303, 304)], 0
        )
        await pilot.pause(0.1)
        select = app.query_one("#log-rank", Select)
        labels = [str(option[0]) for option in select._options]
        assert (
            labels[:3] == ["all ranks", "node 0 (ranks 0-7)", "node 1 (ranks 8-15)"] and "rank 1023" in labels
        )
        select.value = (37, 296, 303)
        await pilot.pause(0.1)
        shown = [entry[0] for entry in app.query_one(LogPane).entries]
        assert shown == [296, 301, 303]
        assert app.query_one(LogView).rank_shown() is None  # a node is no one rank (x needs a rank)
