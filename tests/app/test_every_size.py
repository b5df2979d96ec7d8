"""Issue 61: the app at every size, as a newcomer sees it: the charts of a finished run at 160x45, a
layout made again when the terminal changes size, focus that can be seen, nothing cut at 80x24, no
stale text. What is checked is what the screen draws (the compositor's rows: the snapshot's text and
colours), at 80x24, 160x45 and 160x50."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from test_view_snapshots import pinned_run, recorded
from waiting import settled

from conftest import pinned_comparison, pinned_summary
from mgpu_tui.app import create_app
from mgpu_tui.app.views.run.view import RunView
from mgpu_tui.app.widgets.chart import Chart
from mgpu_tui.app.widgets.log_view import LogPane, LogView

SIZES = {"80x24": (80, 24), "160x45": (160, 45), "160x50": (160, 50)}


def an_app():
    snapshots, topology, host = recorded(0)
    return create_app(telemetry=snapshots, topology=topology, host=host, run_root=Path("no-runs-here"))


def rows(app) -> list[str]:
    """The screen's rows as drawn (the text of the snapshot)."""
    return ["".join(segment.text for segment in strip) for strip in app.screen._compositor.render_strips()]


def within(app, region) -> str:
    """What the screen draws inside ``region``, its rows joined by spaces and runs of spaces made one
    (a sentence wrapped in a panel reads whole; one cut does not)."""
    drawn = rows(app)[region.y : region.bottom]
    return " ".join(" ".join(row[region.x : region.right].split()) for row in drawn).strip()


def panel_text(app, widget) -> str:
    """The text inside a bordered panel as drawn, without its border's characters."""
    return " ".join(within(app, widget.content_region).replace("│", " ").split())


# ---- 1: a finished run's charts at 160x45, and a log box as tall as its lines ---------------------


async def test_a_finished_run_at_160x45_shows_its_charts_over_a_log_box_as_tall_as_its_lines():
    """On 8177ed0 a finished run at 160x45 had no throughput or loss chart, over a log box of 25 rows
    that held 4 lines. The charts show; the box keeps its 4 lines (and the 5 rows a traceback's end
    needs) and gives the rest to the charts."""
    app = an_app()
    async with app.run_test(size=SIZES["160x45"]) as pilot:
        await pilot.press("r")
        view = app.query_one(RunView)
        pinned_run(view, finished=False)
        view.query_one(LogView).reset(2)  # a run whose ranks said 4 lines
        view.add_log_lines([(r, "stdout", f"rank {r} says {n}") for r in (0, 1) for n in (1, 2)], 0)
        view.ended(pinned_summary(Path("runs/x"), steps=240), view.rank_table.shown)
        await settled(pilot)
        await pilot.pause(1.2)  # the pane grows its rows at most once a second (log_pane.py)
        await settled(pilot)
        for chart in ("#throughput", "#loss"):
            assert app.query_one(chart, Chart).region.height >= 5, chart
        screen = "\n".join(rows(app))
        assert "throughput (samples/s), whole run" in screen and "loss (global batch), whole run" in screen
        pane = app.query_one(LogPane)
        assert pane.region.height <= 8, pane.region  # 4 lines, the border, a scroll row, a spare line
        assert within(app, pane.region).count("says") == 4


# ---- 2: a layout made again when the terminal changes size ----------------------------------------


def telemetry():
    from mgpu_tui.engine.records.telemetry_read import TelemetrySeries

    series = TelemetrySeries(host_mem_total=float(64 << 30))
    for i in range(30):
        series.add({"t": float(i), "host": {"cpu": 50 + 40 * math.sin(i / 4), "mem_used": (20 + i) << 30}})
    return series


async def test_an_opened_run_is_laid_out_again_when_the_terminal_grows_and_shrinks():
    """On 8177ed0 a run opened at 80x24 kept its 80x24 layout when the terminal grew to 160x50: its
    machine's charts never came. Each size shows what it has room for, in either order."""
    app = an_app()
    async with app.run_test(size=SIZES["80x24"]) as pilot:
        await pilot.press("r")
        view = app.query_one(RunView)
        pinned_run(view, finished=True)
        view.show_telemetry(telemetry())
        await settled(pilot)

        def shown() -> set[str]:
            screen = "\n".join(rows(app))
            said = {"throughput": "throughput (samples/s)", "loss": "loss (global", "host": "host CPU, whole"}
            return {name for name, words in said.items() if words in screen}

        assert shown() == set()  # 80x24: the result and 5 log lines first
        for size in ("160x45", "160x50", "80x24", "160x45"):
            await pilot.resize_terminal(*SIZES[size])
            await settled(pilot)
            assert shown() == (set() if size == "80x24" else {"throughput", "loss", "host"}), size


# ---- 1: what to try first, at 80x24 ------------------------------------------------------------------


def input_bound():
    """The engine's verdict for a job whose ranks wait for their data (anatomy.py, as a run makes it)."""
    from mgpu_tui.engine.protocol.events import STEP_PARTS
    from mgpu_tui.engine.run.figures.anatomy import StepParts

    parts = StepParts()
    for rank in (0, 1):
        for step in range(1, 21):
            seconds = tuple({"data": 0.05, "forward": 0.01}.get(p, 0.0) for p in STEP_PARTS)
            parts.add(rank, step, sum(seconds), seconds)
        parts.loader_workers(rank, 0)
    (verdict,) = parts.verdicts(warm=2, world_size=2, job="DDP", device="CPU")
    return verdict


async def test_at_80x24_a_finished_runs_panel_shows_what_to_try_before_its_figures():
    """On 8177ed0 the panel's 3 rows held the figures (which the status line says too) and hid the
    run's one useful line, "Input-bound ... Try: ... num_workers"."""
    from mgpu_tui.app.views.run.text import verdict_sentence

    verdict = input_bound()
    app = an_app()
    async with app.run_test(size=SIZES["80x24"]) as pilot:
        await pilot.press("r")
        view = app.query_one(RunView)
        pinned_run(view, finished=False)
        view.ended(pinned_summary(Path("runs/x"), verdicts=(verdict,)), view.rank_table.shown)
        await settled(pilot)
        said = panel_text(app, app.query_one("#root-cause"))
        assert " ".join(verdict_sentence(verdict).split()) in said, said
        assert "num_workers" in said


# ---- 3: the keys on screen (focus that can be seen: test_focus.py) ---------------------------------


@pytest.mark.parametrize("size", ["80x24", "160x50"])
async def test_enter_submits_the_run_and_compare_forms_from_any_field_and_the_screen_says_so(size):
    """On 8177ed0 Enter on the Run view's mode opened its list (the help says Enter starts), Enter in
    Compare's modes ticked one, and nothing said that Tab reaches Start or Compare. A form whose
    steps are empty is refused in a sentence: Enter reached the form (no run starts)."""
    from textual.widgets import Input, Select, SelectionList

    from mgpu_tui.app.views.compare_form import COMPARE_KEYS
    from mgpu_tui.app.views.run.form import RUN_KEYS

    app = an_app()
    async with app.run_test(size=SIZES[size]) as pilot:
        await pilot.press("r")
        await settled(pilot)
        assert RUN_KEYS in "\n".join(rows(app))  # on one row, whole
        mode = app.query_one("#mode", Select)
        assert app.focused is mode
        app.query_one("#steps", Input).value = ""
        await pilot.press("enter")
        await settled(pilot)
        assert not mode.expanded
        assert [n.message for n in app._notifications] == ["steps must be a whole number, got ''."]
        app.clear_notifications()

        await pilot.press("c")
        await settled(pilot)
        status = app.query_one("#compare-status")
        assert panel_text(app, status) == " ".join(COMPARE_KEYS.split())  # whole, at 80x24 too
        modes = app.query_one("#compare-modes", SelectionList)
        modes.deselect_all()
        modes.focus()
        await pilot.press("enter")
        await settled(pilot)
        assert list(modes.selected) == []  # not ticked by Enter
        assert [n.message for n in app._notifications] == ["choose at least one mode to compare."]


# ---- 4: nothing cut at 80x24 -----------------------------------------------------------------------


async def test_at_80x24_the_form_the_guide_the_status_and_the_panel_are_whole(tmp_path):
    """On 8177ed0 at 80x24: "pipeline: on the CPU with / gloo" on two rows, the guide's title cut, the
    status line's reason cut at "nic…", and a script's loss figure cut for its path."""
    from textual.widgets import Select

    from mgpu_tui.app.widgets.mode_guide import demo_title
    from mgpu_tui.engine.launch.spec import LaunchSpec, resolve
    from mgpu_tui.engine.planning.modes import MODES
    from mgpu_tui.engine.run.figures.aggregate import Aggregator

    app = an_app()
    async with app.run_test(size=SIZES["80x24"]) as pilot:
        await pilot.press("r")
        view = app.query_one(RunView)
        for name in ("pipeline", "fsdp_grad_op"):
            app.query_one("#mode", Select).value = name
            await settled(pilot)
            said = app.query_one("#mode", Select).region
            row = rows(app)[said.y]
            assert said.height == 1 and f"{name}: on the CPU with gloo" in row, row
            title = rows(app)[app.query_one("#guide-source").region.y]  # its border, with its title
            assert f"─ {demo_title(MODES[name].demo)} ─" in title and "…" not in title, title

        _, _, host = recorded(0)
        script = tmp_path / "experiments" / "imagenet" / "resnet50_distributed_training.py"
        script.parent.mkdir(parents=True)
        script.write_text("print('a script')\n")
        spec = LaunchSpec(None, script=str(script), nproc=2, device="cpu", nice=10)
        view.started(spec, resolve(spec, host), "runs/20261125T120000Z-script")
        view._begun -= 42  # as if it had started 42 s ago
        view.show(Aggregator().stats(), ([], [], []), 30.0)
        await settled(pilot)
        status = app.query_one("#run-status").region
        assert "(s stops it)   starting for 4" in rows(app)[status.y], rows(app)[status.y]
        said = panel_text(app, app.query_one("#root-cause"))
        assert "Slow to start? Its ranks run at nice 10 so the screen stays quick" in said, said

        pinned = Aggregator()
        stats = pinned_stats(pinned)
        view.show(stats, ([], [], []), 30.0)
        await settled(pilot)
        line = rows(app)[status.y].rstrip()
        assert line.endswith(f"loss {stats.final_loss:.4f}") or f"loss {stats.final_loss:.4f} " in line, line
        assert "(s stops it)" in line and "…" in line  # its path cut, its figures whole


def pinned_stats(events):
    """Two ranks of a script at step 12, as their events say (the engine's own Aggregator)."""
    import time

    from mgpu_tui.engine.protocol.events import Hello, Step

    now = time.time()
    for rank in (0, 1):
        events.add(Hello(rank, now - 30, rank, 2, 4000 + rank, "h", "cpu", None, "script"))
        for step in range(1, 13):
            events.add(Step(rank, now - (12 - step) * 0.1, step, 32, 0, 1.0 / step, 0.1, 1 << 20, 1 << 20))
    return events.stats()


async def test_at_80x24_the_stop_dialog_the_help_and_the_compare_plan_are_whole():
    """On 8177ed0 at 80x24: the stop-rank question's right edge cut, a help line wrapped to column 2,
    and Compare's memory plan showing 4 of its 12 modes."""
    from textual.widgets import DataTable, Static

    from mgpu_tui.app.views.confirm import Confirm
    from mgpu_tui.app.views.help import HelpScreen
    from mgpu_tui.engine.planning.modes import MODES

    app = an_app()
    async with app.run_test(size=SIZES["80x24"]) as pilot:
        question = (
            "Stop rank 1 (pid 4242)? It gets SIGTERM, as if it died on its own: the launcher then stops "
            "the others and the run fails with it as the cause."
        )
        app.push_screen(Confirm(question))
        await settled(pilot)
        box = app.screen.query_one("#confirm")
        edge = rows(app)[box.region.y + 1][box.region.right - 1]
        assert box.region.right <= 80 and edge == "█", rows(app)[box.region.y + 1]  # its border, whole
        assert " ".join(question.split()) in within(app, box.content_region)
        app.pop_screen()

        await pilot.press("question_mark")
        await settled(pilot)
        assert isinstance(app.screen, HelpScreen)
        text = app.screen.query_one(Static)
        widest = max(len(line.rstrip()) for line in str(text.render()).splitlines() if "app.log" not in line)
        assert widest <= text.content_region.width, (widest, text.content_region)
        await pilot.press("escape")

        await pilot.press("c")
        await settled(pilot)
        table = app.query_one("#compare-table", DataTable)
        shown = {row.split()[0] for row in rows(app)[table.region.y : table.region.bottom] if row.split()}
        assert set(MODES) <= shown, (shown, table.region)


# ---- 5: no stale text -------------------------------------------------------------------------------


async def test_the_compare_guide_follows_the_running_mode_and_m_ticks_the_comparison_shown():
    """On 8177ed0 the guide kept the highlighted mode ("Single device (baseline)") while ddp, pipeline
    and fsdp ran, and a comparison shown again (the Runs view's m) kept the list's old ticks."""
    import dataclasses

    from textual.widgets import SelectionList

    from mgpu_tui.app.messages import CompareEnded, CompareStarted, CompareUpdated, ComparisonRead
    from mgpu_tui.app.views.compare import CompareView
    from mgpu_tui.engine.planning.modes import MODES

    app = an_app()
    async with app.run_test(size=SIZES["160x50"]) as pilot:
        await pilot.press("c")
        modes = app.query_one("#compare-modes", SelectionList)
        modes.highlighted = 0  # single
        await settled(pilot)
        comparison = pinned_comparison()
        app.to_views(CompareStarted(comparison))
        for mode in ("ddp", "pipeline"):
            app.to_views(CompareUpdated([], [(mode, 3, 60)]))
            await settled(pilot)
            said = " ".join(str(app.query_one("#compare-guide").render()).split())
            assert said.startswith(f"Running now: {MODES[mode].title}"), said
        app.to_views(CompareEnded(comparison))
        await settled(pilot)
        assert str(app.query_one("#compare-guide").render()).startswith(MODES["single"].title)

        again = [dataclasses.replace(row, mode=mode) for row, mode in zip(comparison.rows, ("single", "tp"))]
        past = dataclasses.replace(comparison, rows=again)
        app.query_one(CompareView).post_message(ComparisonRead(past))
        await settled(pilot)
        assert set(modes.selected) == {"single", "tp"}
