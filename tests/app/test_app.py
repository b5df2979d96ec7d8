"""The app, driven with Textual's Pilot, on the real engine: real ranks, real files."""

import asyncio
import os
import re
import threading
import time
from pathlib import Path

import pytest
from textual.widgets import Input, Select, Static
from waiting import wait_for

from conftest import live_processes_of, pinned_comparison, pinned_summary
from mgpu_tui.app import create_app
from mgpu_tui.app.views.confirm import Confirm
from mgpu_tui.app.views.run.view import RunView
from mgpu_tui.app.widgets.log_pane import LogPane
from mgpu_tui.app.widgets.status_line import StatusLine
from mgpu_tui.app.widgets.text_panel import TextPanel
from mgpu_tui.console import fmt_rate
from mgpu_tui.engine.launch.priority import UI_RANK_NICE

DEMOS = Path(__file__).resolve().parents[2] / "demos"


def thread_nices(pid: int) -> set[int]:
    """The nice values of every thread of process ``pid``."""
    return {os.getpriority(os.PRIO_PROCESS, int(tid)) for tid in os.listdir(f"/proc/{pid}/task")}


def footer(app) -> list[str]:
    """What the footer offers now: its keys' descriptions."""
    return [key.description for key in app.query("FooterKey")]


async def start_ddp_in_the_form(app, pilot, steps: str, model: str | None = None) -> None:
    """r, then the Run form filled for a 2-rank ddp run on the CPU (``model``: its workload), and Start."""
    await pilot.press("r")
    form = app.query_one("#run-form")
    form.query_one("#mode", Select).value = "ddp"
    form.query_one("#nproc", Input).value = "2"
    form.query_one("#steps", Input).value = steps
    form.query_one("#device", Select).value = "cpu"
    if model is not None:
        form.query_one("#model", Select).value = model  # the workload, as --model
    await pilot.click("#start")


def show_started(app, spec, run_dir: str = "runs/x") -> RunView:
    """The Run view showing ``spec`` as started (as `run --tui` hands a run over), no process behind it."""
    from mgpu_tui.engine.launch.spec import resolve
    from mgpu_tui.engine.machine.host import probe

    view = app.query_one(RunView)
    view.started(spec, resolve(spec, probe()), run_dir)
    return view


async def test_start_ddp_from_the_ui_see_both_ranks_then_stop(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the run directory lands under ./runs
    app = create_app()
    async with app.run_test(size=(160, 50)) as pilot:
        await start_ddp_in_the_form(app, pilot, "1000", model="gpt-tiny")  # s stops it
        assert app.jobs.runs.run.resolved.spec.model == "gpt-tiny"
        run_dir = app.jobs.runs.run.run_dir.path
        pane = app.query_one(LogPane)

        def both_ranks_on_screen() -> bool:  # the log pane's rows as drawn
            drawn = "\n".join(pane.render_line(y).text for y in range(pane.size.height))
            return "rank 0 " in drawn and "rank 1 " in drawn

        assert await wait_for(pilot, both_ranks_on_screen), "no log lines from both ranks"
        status = app.query_one("#run-status", StatusLine)
        assert await wait_for(
            pilot, lambda: "samples/s" in str(status.render()) and "n/a samples" not in str(status.render())
        )
        view = app.query_one(RunView)
        assert [row[0] for row in view.rank_table.rank_rows] == ["rank 0", "rank 1"]
        # The app's runs give way to its screen: every thread of the launcher and of each
        # rank niced, and each one's session group too.
        assert len(app.jobs.runs.rank_processes()) == 2
        for proc in live_processes_of(run_dir):
            assert thread_nices(proc.pid) == {UI_RANK_NICE}, proc.cmdline()
            autogroup = Path(f"/proc/{proc.pid}/autogroup")
            if autogroup.exists():  # a kernel with sched_autogroup
                assert autogroup.read_text().split()[-1] == str(UI_RANK_NICE)
        table = str(app.query_one("#ranks", TextPanel).render())
        assert "samples/s" in table.splitlines()[0] and table.splitlines()[2].startswith("rank 1")
        await pilot.press("t", "r")  # on the Run tab, letters must still be the app's keys
        await pilot.press("q")  # a run is going: quitting asks first
        await pilot.pause(0.3)
        assert isinstance(app.screen, Confirm)
        assert "Quit and stop every rank?" in str(app.screen.query_one("Static").render())
        assert app.screen.query_one("#confirm").size.width > 40  # the box is drawn, not collapsed
        await pilot.press("n")  # no: the run goes on (y, in a real terminal: tests/test_app_tmux.py)
        await pilot.pause(0.3)
        assert app.jobs.runs.active and not isinstance(app.screen, Confirm)
        assert "Stop" in footer(app)
        await pilot.press("s")
        assert await wait_for(pilot, lambda: not app.jobs.runs.active, timeout=30)
        assert await wait_for(pilot, lambda: "Stop" not in footer(app), timeout=5)  # nothing left to stop
        await pilot.pause(0.3)
        assert "interrupted" in str(status.render()) or "finished ok" in str(status.render())
        await pilot.pause(0.3)
        assert not app.screen.query("Toast")  # "Stopping every rank…" leaves with the run (issue #31)
    assert live_processes_of(run_dir) == []


@pytest.mark.parametrize("key", ["q", "ctrl+q", "ctrl+c"])
async def test_a_quit_answered_after_the_run_ended_quits_at_once(tmp_path, monkeypatch, key):
    """Issue #43: s, then q, then y: the run ended while the question was up, its end found nobody
    quitting, and the app sat on "Stopping every rank, then quitting…" for good. Ctrl+Q quit at once
    with a run going, and Ctrl+C only said to press Ctrl+Q: both ask as q does."""
    monkeypatch.chdir(tmp_path)
    app = create_app()
    async with app.run_test(size=(160, 50)) as pilot:
        await start_ddp_in_the_form(app, pilot, "100000")
        assert await wait_for(pilot, lambda: app.jobs.runs.active, timeout=30)
        run_dir = app.jobs.runs.run.run_dir.path
        assert await wait_for(pilot, lambda: "Stop" in footer(app), timeout=5)  # s: only with work to stop
        await pilot.press(key)
        await pilot.pause(0.3)
        assert isinstance(app.screen, Confirm) and app.return_code is None  # asked, not quit
        app.jobs.runs.request_stop()  # the s pressed before: the run ends under the question
        assert await wait_for(pilot, lambda: not app.jobs.runs.active, timeout=30)
        await pilot.pause(0.5)  # its end is handled, nobody quitting yet
        assert app.return_code is None
        await pilot.press("y")
        assert await wait_for(pilot, lambda: app.return_code is not None, timeout=5)
    assert live_processes_of(run_dir) == []


async def test_a_comparison_ending_as_the_app_closes_leaves_no_error():
    """CI, stop 47: a comparison's end asks for the footer's keys again after the next frame and
    one second later; the app closed in between, and the late call raised "No screens on stack"."""
    from mgpu_tui.app.messages import CompareEnded

    app = create_app(telemetry=[], topology=None)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause(0.1)
        app.post_message(CompareEnded(pinned_comparison()))  # a worker's news, not yet handled
        app._running = False  # what App._shutdown does first, then it closes every screen:
        await app._close_all()
        await asyncio.sleep(1.3)  # the news handled, and the timer it set (1 s) fired
    # run_test raises what the app raised while closing: nothing may have


async def test_bad_form_input_is_one_sentence_and_starts_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    app = create_app()
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.press("r")
        app.query_one("#steps", Input).value = ""
        await pilot.click("#start")
        await pilot.pause(0.3)
        assert not app.jobs.runs.active
        assert any("steps must be a whole number" in str(n.message) for n in app._notifications)
    assert not (tmp_path / "runs").exists()


async def test_help_lists_the_keys_and_closes_on_escape():
    from mgpu_tui.app.views.help import HelpScreen

    app = create_app(telemetry=[], topology=None)
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.press("question_mark")
        await pilot.pause(0.2)
        assert isinstance(app.screen, HelpScreen)
        assert app.screen.query_one("#help").size.width > 40
        assert "quit (asks first while a run is going)" in str(app.screen.query_one("Static").render())
        await pilot.press("escape")
        await pilot.pause(0.2)
        assert not isinstance(app.screen, HelpScreen)


def test_rank_states_read_as_a_user_expects():
    from mgpu_tui.app.views.run.text import rank_state
    from mgpu_tui.engine.run.figures.rank_stats import RankStats

    def rank(step, last_t=100.0, done=False, error=None):
        return RankStats(0, step, 10.0, 1.0, None, None, last_t, done, error, "cpu", 1)

    assert rank_state(None, 100, 30, None, finished=False) == "starting"
    assert rank_state(rank(5), 110, 30, None, finished=False) == "running"
    assert rank_state(rank(5), 200, 30, None, finished=False) == "stalled"
    assert rank_state(rank(5, done=True), 200, 30, None, finished=True) == "done"
    assert rank_state(rank(5), 200, 30, 0, finished=True) == "failed"
    assert rank_state(rank(5, error="boom"), 110, 30, None, finished=False) == "failed"
    assert rank_state(rank(5), 200, 30, None, finished=True) == "stopped"
    assert rank_state(None, 200, 30, None, finished=True, ok=True) == "done"  # a script without reporter
    assert rank_state(None, 200, 30, 1, finished=True, number=1) == "failed"  # ... that torchrun named
    assert rank_state(None, 200, 30, 1, finished=True, number=0) == "stopped"
    # Issue #43: beside the culprit, a rank that only lost its peer is not a second failure.
    gone = "RuntimeError: [gloo/transport/tcp/pair.cc:534] Connection closed by peer [127.0.0.1]:4021"
    assert rank_state(rank(5, error=gone), 200, 30, 1, finished=True) == "no peer"
    assert rank_state(rank(5, error=gone), 200, 30, None, finished=True) == "failed"  # no culprit known
    # Issue 56: a rank of the stall found stays stalled once the run ended, whatever it said as it
    # was stopped (mp.spawn's children said done); one that moved past its stalled step did not hang.
    hung = {0: 5}
    assert rank_state(rank(5, done=True), 200, 30, None, finished=True, hung=hung) == "stalled"
    assert rank_state(rank(5), 200, 30, None, finished=True, hung=hung) == "stalled"
    assert rank_state(rank(6, done=True), 200, 30, None, finished=True, hung=hung) == "done"
    assert rank_state(rank(5), 200, 30, 0, finished=True, hung=hung) == "failed"  # the stall's culprit
    assert rank_state(None, 200, 30, None, finished=True, number=0, hung={0: 0}) == "stalled"


async def test_compare_two_modes_from_the_ui_table_and_charts(tmp_path, monkeypatch):
    from textual.widgets import DataTable, SelectionList, Static

    from mgpu_tui.app.views.compare import CompareView
    from mgpu_tui.app.views.runs import COLUMNS as RUNS_COLUMNS

    monkeypatch.chdir(tmp_path)
    app = create_app()
    async with app.run_test(size=(180, 50)) as pilot:
        await pilot.press("c")
        await pilot.pause(0.2)
        view = app.query_one(CompareView)
        modes = view.query_one("#compare-modes", SelectionList)
        assert set(modes.selected) == {"ddp", "fsdp", "pipeline"}  # the default choice
        modes.deselect_all()
        modes.select("single")  # two one-process modes: the flow is the same, the launches cheaper
        modes.select("mp")
        view.query_one("#compare-steps", Input).value = "10"
        view.query_one("#compare-device", Select).value = "cpu"
        view.query_one("#compare-nproc", Input).value = "2"
        view.query_one("#compare-model", Select).value = "gpt-tiny"
        await pilot.click("#compare-start")
        assert await wait_for(pilot, lambda: app.jobs.comparing.active, timeout=10)
        assert await wait_for(pilot, lambda: not app.jobs.comparing.active, timeout=120)
        await pilot.pause(0.3)
        table = view.query_one("#compare-table")
        rows = [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]
        assert [r[0] for r in rows] == ["single", "mp"] and all(r[1] == "ok" for r in rows)
        assert sum("*" in cell for r in rows for cell in r) >= 4  # best values marked
        charts = str(view.query_one("#compare-charts", Static).render())
        assert "samples/s" in charts and "loss over steps" in charts
        status = str(view.query_one("#compare-status", TextPanel).render())
        assert "2 run(s) done" in status
        comparison = app.jobs.comparing.runner.comparison
        assert [r.status for r in comparison.rows] == ["ok", "ok"]
        assert comparison.settings.model == "gpt-tiny" and all(r.tokens_per_s for r in comparison.rows)
        # mp on the CPU is degenerate, and its summary says what it does not show here.
        single, mp = comparison.rows
        assert single.note is None and "every stage sits on the one CPU" in mp.note
        # The same numbers as the CLI: the rows the engine made.
        assert rows[0][3].rstrip(" *") == fmt_rate(comparison.rows[0].samples_per_s)
        # Issue #31: the Runs view names each run's comparison, and m shows that comparison again,
        # read back from its runs' folders.
        await pilot.press("h")
        runs = app.query_one("#runs-table", DataTable)
        assert await wait_for(pilot, lambda: runs.row_count == 2, timeout=10)
        column = list(RUNS_COLUMNS).index("comparison")
        assert {str(runs.get_row_at(i)[column]) for i in range(2)} == {comparison.id}
        view.query_one("#compare-charts", Static).update("")  # gone, to be drawn again from the folders
        await pilot.press("m")
        assert await wait_for(pilot, lambda: app.query_one("#views").current == "compare-view", timeout=5)
        status = view.query_one("#compare-status", TextPanel)
        assert await wait_for(pilot, lambda: "read back from their folders" in str(status.render()), 20)
        again = [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]
        assert [r[0] for r in again] == ["single", "mp"] and [r[3] for r in again] == [r[3] for r in rows]
        assert "loss over steps" in str(view.query_one("#compare-charts", Static).render())
    for row in comparison.rows:
        assert live_processes_of(Path(row.run_dir)) == []


async def test_a_tab_clicked_or_keyed_shows_its_view_built_on_first_show():
    from textual.widgets import ContentSwitcher

    app = create_app(telemetry=[], topology=None)
    async with app.run_test(size=(160, 50)) as pilot:
        views = app.query_one(ContentSwitcher)
        assert views.current == "dashboard-view" and not app.query("#compare-view")
        await pilot.click("#topology")  # the tab, with the mouse
        await pilot.pause(0.2)
        assert views.current == "topology-view"
        await pilot.press("c")  # the Compare view does not exist until its tab first shows
        await pilot.pause(0.2)
        assert views.current == "compare-view" and app.query_one("#compare-view").display
        await pilot.press("d")
        await pilot.pause(0.2)
        assert views.current == "dashboard-view" and not app.query_one("#compare-view").display


def test_a_newer_update_replaces_a_waiting_one_of_its_kind_only():
    from mgpu_tui.app.messages import CompareUpdated, RunEnded, RunUpdated, TelemetryUpdated

    def updated():
        return RunUpdated(lambda: ([], 0), None, ([], [], []), 30.0)

    def ended():
        return RunEnded(None, None, lambda: ([], 0))

    run, telemetry = updated(), TelemetryUpdated(None)
    assert updated().can_replace(run)
    assert TelemetryUpdated(None).can_replace(telemetry)
    assert CompareUpdated([], []).can_replace(CompareUpdated([], []))
    assert not updated().can_replace(telemetry)
    assert not ended().can_replace(run) and not updated().can_replace(ended())


@pytest.mark.parametrize("open_before_the_read", [True, False], ids=["opened-while-reading", "opened-after"])
async def test_the_topology_read_after_the_first_frame_reaches_its_view(open_before_the_read, monkeypatch):
    import threading

    from mgpu_tui.app.messages import TopologyRead
    from mgpu_tui.app.views.topology import TopologyView
    from mgpu_tui.engine.machine import topology

    # The read is this machine's own, held until the test lets it go: a big box can take a while.
    read_done, real_read = threading.Event(), topology.from_nvml
    monkeypatch.setattr(topology, "from_nvml", lambda: read_done.wait(10) and real_read())
    app = create_app(telemetry=[])  # the topology is read once the first frame is up
    async with app.run_test(size=(160, 50)) as pilot:

        def shown() -> str:
            return str(app.query_one(TopologyView).render())

        if open_before_the_read:
            await pilot.press("t")
            await pilot.pause(0.2)
            assert "reading the topology" in shown()
            assert "GPU" not in shown().replace("NVML", "")  # nothing said of GPUs before it knows
            read_done.set()
        else:
            read_done.set()
            assert await wait_for(pilot, lambda: TopologyRead in app._latest, timeout=10)
            await pilot.press("t")
        assert await wait_for(pilot, lambda: "reading the topology" not in shown(), timeout=10)
        # This machine has no NVIDIA driver: the view says why, as `mgpu-tui topo` does.
        assert "no NVIDIA GPU here" in shown(), shown()


async def test_a_failed_rank_shows_the_root_cause_with_its_traceback(tmp_path):
    from textual.widgets import Static

    from mgpu_tui.engine.launch.spec import LaunchSpec

    spec = LaunchSpec(
        "ddp",
        nproc=2,
        steps=50,
        device="cpu",
        run_root=tmp_path,
        demo_args=("--fail-at-step", "3", "--fail-rank", "1"),
    )
    app = create_app(start=spec, telemetry=[], topology=None)  # as `run ... --tui` opens it
    async with app.run_test(size=(160, 50)) as pilot:
        view = app.query_one(RunView)
        assert await wait_for(pilot, lambda: view.finished, timeout=60), "the run never ended"
        await pilot.pause(0.2)
        panel = app.query_one("#root-cause", Static)
        assert panel.display and panel.size.height > 3  # shown, not collapsed
        cause = str(panel.render())
        assert cause.startswith("Root cause: rank 1 failed first"), cause
        assert "RuntimeError: injected failure at step 3 on rank 1" in cause and "Traceback" in cause
        assert view.rank_table.rank_rows[1][1] == "failed"
        assert "FAILED" in str(app.query_one("#run-status", StatusLine).render())
        run_dir = app.jobs.runs.run.run_dir.path
    assert live_processes_of(run_dir) == []


async def test_a_ranks_escapes_and_markup_in_paths_are_shown_as_plain_text(tmp_path):
    """A run directory whose path holds markup ([/] crashed the app once) and a rank whose
    exception carries terminal escapes: the app shows both as the text they are."""
    from textual.widgets import Static

    from mgpu_tui.engine.launch.spec import LaunchSpec

    job = tmp_path / "job.py"
    job.write_text(
        'import os\nif os.environ["RANK"] == "1":\n'
        '    raise RuntimeError("\\x1b]0;pwned\\x07\\x1b[2J[bold]boom[/]")\n'
    )
    root = tmp_path / "runs [/] [bold]"
    spec = LaunchSpec(None, script=str(job), nproc=2, device="cpu", run_root=root)
    app = create_app(start=spec, telemetry=[], topology=None)
    async with app.run_test(size=(160, 50)) as pilot:
        view = app.query_one(RunView)
        status = app.query_one("#run-status", StatusLine)
        assert await wait_for(pilot, lambda: view.finished, timeout=60), "the run never ended"
        await pilot.pause(0.2)
        cause = str(app.query_one("#root-cause", Static).render())
        assert "RuntimeError: ^[]0;pwned^G^[[2J[bold]boom[/]" in cause, cause
        assert "\x1b" not in cause and "\x07" not in cause
        screen = app.export_screenshot()  # what the terminal was sent to draw
        assert "^[]0;pwned" in screen and "\x1b]0;" not in screen
        assert "FAILED" in str(status.render())
        assert status.text.endswith(str(root)[-40:] + "/" + app.jobs.runs.run.run_dir.path.name)  # as it is
        run_dir = app.jobs.runs.run.run_dir.path
    assert "[/]" in str(run_dir) and live_processes_of(run_dir) == []


async def test_the_runs_view_lists_past_runs_and_enter_opens_one(tmp_path):
    """h shows the run folder's runs, newest first, a broken folder as broken; Enter on a run
    replays it in the Run view, its rows, its figures and the machine's telemetry."""
    from textual.widgets import DataTable

    from conftest import read_summary, run_cli
    from mgpu_tui.app.widgets.telemetry_charts import TelemetryCharts

    runs = tmp_path / "runs"
    done = run_cli(
        "run", "mp", "--steps", "20", "--device", "cpu", "--run-dir", str(runs), "--sample-interval", "0.2"
    )
    assert done.returncode == 0, done.stderr
    (runs / "00-not-a-run").mkdir()
    summary = read_summary(next(p for p in runs.iterdir() if p.name != "00-not-a-run") / "summary.json")
    app = create_app(telemetry=[], topology=None, run_root=runs)
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.press("h")
        table = app.query_one("#runs-table", DataTable)
        assert await wait_for(pilot, lambda: table.row_count == 2, timeout=10)
        first, second = (table.get_row_at(i) for i in range(2))
        assert (str(first[1]), str(first[3])) == ("mp", "ok")
        assert str(first[5]) == fmt_rate(summary.samples_per_s)
        assert (str(second[3]), str(second[8])) == ("broken", "no spec.json: not a run directory")
        table.focus()
        await pilot.press("enter")  # the cursor starts on the newest run
        view = app.query_one(RunView)
        assert await wait_for(pilot, lambda: view.finished, timeout=10)
        assert app.query_one("#views").current == "run-view"
        assert [row[:3] for row in view.rank_table.rank_rows] == [("rank 0", "done", "20")]
        status = str(app.query_one("#run-status", StatusLine).render())
        assert status.startswith("mp finished ok: 20 steps")
        telemetry = app.query_one(TelemetryCharts)
        assert telemetry.display and len(app.query_one("#tm-cpu").values) >= 2
        assert not app.jobs.busy  # a record is no run of the app's: q quits at once


async def test_each_mode_chosen_in_the_run_view_shows_its_explanation_and_its_demos_source():
    from rich.syntax import Syntax

    from mgpu_tui.app.widgets.mode_guide import ModeGuide, demo_source
    from mgpu_tui.engine.planning.modes import MODES

    app = create_app(telemetry=[], topology=None)
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.press("r")
        guide = app.query_one(ModeGuide)
        assert guide.display and not app.query_one("#logs").display  # no run yet: the guide has the room
        for name, mode in MODES.items():
            app.query_one("#mode", Select).value = name
            await pilot.pause()
            said = str(app.query_one("#guide-explanation").render())
            for text in (mode.title, mode.teaches, mode.choose, mode.costs, f"docs/modes.md#{name}"):
                assert " ".join(text.split()) in " ".join(said.split()), (name, text)
            code = app.query_one("#guide-code").content
            assert isinstance(code, Syntax) and code.code == demo_source(mode.demo)
            (path,) = DEMOS.rglob(f"{mode.demo}.py")  # demos/, or its family's folder under it
            assert code.code == path.read_text()  # the demo itself, as the user would open it
            shown = app.query_one("#guide-source").border_title
            assert f"{path.relative_to(DEMOS.parent).as_posix()}: " in shown
        await pilot.press("v")  # the logs instead, and back
        assert not guide.display and app.query_one("#logs").display
        await pilot.press("v")
        assert guide.display


async def test_enter_in_the_form_starts_a_run_whose_charts_span_it_whole(tmp_path, monkeypatch):
    from mgpu_tui.app.widgets.chart import Chart

    monkeypatch.chdir(tmp_path)
    app = create_app(telemetry=[], topology=None)
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.press("r")
        form = app.query_one("#run-form")
        form.query_one("#mode", Select).value = "single"  # one process: 300 steps in a few seconds
        form.query_one("#device", Select).value = "cpu"
        steps = form.query_one("#steps", Input)
        steps.value = "300"
        steps.focus()
        await pilot.press("enter")
        assert app.jobs.runs.active
        view = app.query_one(RunView)
        assert await wait_for(pilot, lambda: view.finished, timeout=90)
        await pilot.pause(0.3)
        for chart_id in ("#throughput", "#loss"):
            chart = app.query_one(chart_id, Chart)
            assert chart.whole and chart.steps[0] == 1 and chart.steps[-1] == 300, chart_id
            assert str(chart.render()).splitlines()[-1].split() == ["step", "1", "─", "smoothed", "300"]
        result = str(app.query_one("#root-cause").render())
        assert result.startswith("Finished: 300/300 steps") and str(app.jobs.runs.run.run_dir.path) in result
        # The tensors' peak beside the plan's, and what the process held besides (docs/run-view.md).
        said = r"Memory, rank 0: tensors at their peak ([\d.]+) MiB, planned ([\d.]+) MiB"
        memory = re.search(said, result)
        assert memory and abs(float(memory[1]) / float(memory[2]) - 1) < 0.1, result
        assert "(as planned)" in result and "the process held" in result
        await pilot.press("w")  # the latest steps instead: the last ones that fit the width
        chart = app.query_one("#loss", Chart)
        assert not chart.whole and str(chart.render()).splitlines()[-1].split()[-1] == "300"


async def test_a_straggler_is_marked_in_the_rank_table_with_where_its_time_goes(tmp_path):
    from mgpu_tui.engine.launch.spec import LaunchSpec

    spec = LaunchSpec(
        mode="ddp",
        nproc=2,
        steps=40,
        device="cpu",
        run_root=tmp_path,
        demo_args=("--fail-kind", "slow", "--fail-rank", "1"),
    )
    app = create_app(start=spec, telemetry=[], topology=None)
    async with app.run_test(size=(160, 50)) as pilot:
        view = app.query_one(RunView)
        assert await wait_for(
            pilot, lambda: any(row[1] == "slow" for row in view.rank_table.rank_rows), timeout=90
        )
        assert [
            row[1] for row in view.rank_table.rank_rows if row[1] == "slow"
        ] and view.rank_table.rank_rows[1][1] == "slow"
        # Issue 41: its step taken apart says why, with the change to try (the straggler's own
        # sentence, which says less, is left to the result for the note's few lines).
        note = str(app.query_one("#root-cause").render())
        assert note.startswith("Input-bound: rank 1 waits for its data") and "Try: " in note
        assert "Straggler" not in note
        assert await wait_for(pilot, lambda: view.finished, timeout=90)
        await pilot.pause(0.3)
        result = str(app.query_one("#root-cause").render())
        assert "Straggler: rank 1 arrives" in result and "Input-bound: rank 1" in result  # kept


async def test_the_compare_view_plans_the_memory_before_running_and_greys_out_what_cannot_fit():
    import psutil
    from textual.widgets import DataTable, SelectionList

    from mgpu_tui.app.views.compare import CompareView
    from mgpu_tui.console import fmt_bytes
    from mgpu_tui.engine.planning.memory import Training, needed, plan_run
    from mgpu_tui.engine.planning.shapes import model_shape

    app = create_app()  # this machine's own telemetry: its memory is what the plan is checked against
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.press("c")
        view = app.query_one(CompareView)
        assert await wait_for(pilot, lambda: view.host_mem is not None, timeout=10)
        view.query_one("#compare-device", Select).value = "cpu"
        modes = view.query_one("#compare-modes", SelectionList)
        table = view.query_one("#compare-table", DataTable)

        def rows():
            cells = (table.get_row_at(i) for i in range(table.row_count))
            return {str(r[0]): [str(c) for c in r] for r in cells}

        # A 7B model does not fit this machine's memory in any mode: each is greyed out and unticked.
        view.query_one("#compare-model", Select).value = "gpt-7b"
        await pilot.pause(0.2)
        assert {r[1] for r in rows().values()} == {"NO"}
        assert modes.selected == [] and all(o.disabled for o in modes.options)
        assert str(modes.get_option_at_index(2).prompt).startswith("ddp  too big: ")
        # gpt-tiny fits everywhere: the modes come back, and each figure is the planner's.
        view.query_one("#compare-model", Select).value = "gpt-tiny"
        await pilot.pause(0.2)
        assert {r[1] for r in rows().values()} == {"yes"} and not any(o.disabled for o in modes.options)
        ddp = plan_run("ddp", model_shape("gpt-tiny"), 2, Training(batch_size=64))
        assert rows()["ddp"][1:] == [
            "yes",
            fmt_bytes(needed(ddp, shared=True)),
            "2",
            "rank 0",
            fmt_bytes(ddp.devices[0].state),
            fmt_bytes(ddp.devices[0].activations),
            fmt_bytes(ddp.devices[0].buffers),
        ]
        assert view.host_mem == psutil.virtual_memory().total
        said = str(view.query_one("#compare-charts").render())
        assert "which CPU ranks share" in said and "greyed out" in said


async def test_the_compare_view_explains_the_mode_under_the_cursor_with_its_demos_source():
    from textual.widgets import SelectionList

    from mgpu_tui.app.widgets.mode_guide import demo_source
    from mgpu_tui.engine.planning.modes import MODES

    app = create_app(telemetry=[], topology=None)
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.press("c")
        modes = app.query_one("#compare-modes", SelectionList)
        modes.focus()
        for index in (4, 6):  # ddp_mp, then fsdp: the explanation follows the cursor
            modes.highlighted = index
            await pilot.pause()
            mode = MODES[modes.get_option_at_index(index).value]
            said = " ".join(str(app.query_one("#compare-guide").render()).split())
            assert " ".join(mode.costs.split()) in said and mode.title in said
            assert app.query_one("#compare-code").content.code == demo_source(mode.demo)
        app.set_focus(None)
        await pilot.press("v")  # its source hides, and shows again
        assert not app.query_one("#compare-code").display
        await pilot.press("v")
        assert app.query_one("#compare-code").display


async def test_the_runs_view_lists_a_hostile_folder_and_opens_its_runs_as_plain_text(tmp_path):
    """A run folder whose files ranks rewrote (issue #28): FIFOs, links, NaN, escape sequences,
    a world of 2**40 ranks. The Runs view lists every entry (the broken ones with their reason),
    the app stays up, and the failed run opens with its texts shown, not obeyed."""
    import sys

    from textual.widgets import DataTable

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "unit"))
    from test_hostile_folder import ESC_OR_C1, _hostile_root

    root = _hostile_root(tmp_path)
    app = create_app(telemetry=[], topology=None, run_root=root)
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.press("h")
        table = app.query_one("#runs-table", DataTable)
        assert await wait_for(pilot, lambda: table.row_count == 9, timeout=10)
        rows = [[str(cell) for cell in table.get_row_at(i)] for i in range(table.row_count)]
        shown = "\n".join(" ".join(row) for row in rows)
        assert not any(c in shown for c in ESC_OR_C1)
        assert "summary.json: not a regular file (a FIFO)" in shown
        table.focus()
        failed = next(i for i, row in enumerate(rows) if row[3] == "failed")
        table.move_cursor(row=failed)
        await pilot.press("enter")
        view = app.query_one(RunView)
        assert await wait_for(pilot, lambda: view.finished, timeout=10)
        await pilot.pause(0.2)
        screen = app.export_screenshot()  # every cell as drawn, as SVG text
        assert "U+202E&gt;evil" in screen and not any(c in screen for c in ESC_OR_C1)
        assert app.is_running


async def test_slash_puts_the_cursor_in_the_log_search_and_a_new_run_starts_it_empty():
    """Issue #31: `/` focuses the log search (its letters never switch views: d, h, t, c are views),
    and the next run's log starts unfiltered (a search left from the last run made it look empty)."""
    from textual.widgets import ContentSwitcher

    from mgpu_tui.app.widgets.log_view import LogView

    app = create_app(telemetry=[], topology=None)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("r")
        await pilot.press("slash")
        search = app.query_one("#log-search", Input)
        assert app.focused is search and app.query_one("#logs").display  # the logs, not the guide
        await pilot.press("d", "h", "t", "c")
        await pilot.pause()
        assert search.value == "dhtc"
        assert app.query_one(ContentSwitcher).current == "run-view"
        app.query_one(LogView).reset(2)  # what the Run view does as a run starts
        assert search.value == ""


async def test_the_screenshot_goes_to_the_current_folder_where_there_is_no_downloads_folder(
    tmp_path, monkeypatch
):
    """Issue #31: the palette's screenshot failed where ~/Downloads does not exist."""
    home, here = tmp_path / "home", tmp_path / "here"
    home.mkdir()
    here.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_DOWNLOAD_DIR", raising=False)
    monkeypatch.chdir(here)
    app = create_app(telemetry=[], topology=None)
    async with app.run_test(size=(80, 24)) as pilot:
        app.action_screenshot()
        # The file is there once opened, its picture once written: wait for the picture whole.
        whole = lambda: [p for p in here.glob("*.svg") if p.read_text().rstrip().endswith("</svg>")]  # noqa: E731
        assert await wait_for(pilot, whole, timeout=10)
        # Textual's saving thread then tells the app it is done: the app must still be there.
        saving = lambda: any("save_file" in t.name for t in threading.enumerate())  # noqa: E731
        assert await wait_for(pilot, lambda: not saving(), timeout=10)
    (shot,) = here.glob("*.svg")
    assert "<svg" in shot.read_text()[:2000] and not (home / "Downloads").exists()


@pytest.mark.parametrize("size", [(80, 24), (160, 50)])
async def test_the_compare_views_number_fields_show_their_values_whole(size):
    """Issue #31: at 80x24 the ranks, steps and batch fields had 2 columns for their values, so
    after Tab they read "steps 0" and "batch 4" for 60 and 64."""
    app = create_app(telemetry=[], topology=None)
    async with app.run_test(size=size) as pilot:
        await pilot.press("c")
        await pilot.pause(0.3)
        for field in ("#compare-nproc", "#compare-steps", "#compare-batch"):
            box = app.query_one(field, Input)
            assert box.content_region.width >= 4 > len(box.value), (field, box.content_region)


@pytest.mark.parametrize("size", [(80, 24), (160, 50)])
async def test_every_model_name_fits_its_dropdown_on_one_row(size):
    """Issue #31: the model dropdown wrapped gpt-tiny as "gpt-ti" / "ny" at both sizes."""
    from mgpu_tui.app.views.run.form import MODEL_OPTIONS

    app = create_app(telemetry=[], topology=None)
    async with app.run_test(size=size) as pilot:
        for tab, field in (("r", "#model"), ("c", "#compare-model")):
            await pilot.press(tab)
            await pilot.pause(0.2)
            select = app.query_one(field, Select)
            for _, name in MODEL_OPTIONS:
                select.value = name
                await pilot.pause()
                label = select.query_one("SelectCurrent #label")
                assert label.region.height == 1 and label.region.width >= len(name), (field, name)


async def test_a_script_run_shows_the_scripts_own_guide_and_keeps_its_logs_in_view(tmp_path):
    """Issue #43: `torchrun ... --tui` and `run --script ... --tui` showed "Single device (baseline)"
    and demos/single.py, and once the run ended that guide took the logs' place. The guide is the
    script's own (its command line, its source, read as plain text), and the logs stay in view."""
    from mgpu_tui.app.widgets.log_view import LogView
    from mgpu_tui.app.widgets.mode_guide import ModeGuide
    from mgpu_tui.engine.launch.spec import LaunchSpec

    script = tmp_path / "train.py"
    script.write_text('print("\x1b]2;pwned\x07")\nEPOCHS = 3  # my own loop\n')
    ran = LaunchSpec(mode="script", script=str(script), demo_args=("--epochs", "3"), nproc=2)
    app = create_app(telemetry=[], topology=None, run_root=tmp_path)
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.press("r")
        view = show_started(app, ran, str(tmp_path / "runs" / "x"))
        await pilot.pause(0.3)
        assert app.query_one(LogView).display and not app.query_one(ModeGuide).display
        view.ended(pinned_summary(tmp_path / "runs" / "x", mode="script", program=str(script)), None)
        await pilot.pause(0.3)
        assert app.query_one(LogView).display and not app.query_one(ModeGuide).display
        await pilot.press("v")
        await pilot.pause(0.3)
        said = str(app.query_one("#guide-explanation").render())
        assert "Your own script" in said and "train.py --epochs 3" in said and "Single device" not in said
        assert str(app.query_one("#guide-source").border_title).endswith("train.py: the script it runs")
        code = app.query_one("#guide-code", Static).content
        assert "EPOCHS = 3  # my own loop" in code.code and "\x1b" not in code.code  # drawn as text
        # A followed run's spec.json is the ranks' to write: a script's name is never markup.
        hostile = LaunchSpec(mode="script", script="[reverse]x[/reverse].py", nproc=2)
        app.query_one(ModeGuide).show_program(hostile)
        await pilot.pause(0.2)
        title = app.query_one("#guide-source")._border_title
        assert title.plain.startswith("[reverse]x[/reverse].py") and not title.spans


async def test_a_script_run_shown_in_the_form_is_what_start_runs_again(tmp_path):
    """Issue #31: a script run reopened showed ddp and 1000 steps, so Start ran a demo. The form now
    shows the script with its arguments as the mode list's last entry, steps and batch off (a script
    says its own), and Start's spec is the script's on the form's ranks and device."""
    from textual.widgets._select import SelectCurrent

    from mgpu_tui.app.views.run.form import RunForm
    from mgpu_tui.engine.launch.spec import LaunchSpec

    ran = LaunchSpec(
        mode="script", script="train.py", demo_args=("--max-iters", "10"), nproc=2, stall_timeout=9.0
    )
    app = create_app(telemetry=[], topology=None, run_root=tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("r")
        form = app.query_one(RunForm)
        form.fill(ran, 2)
        await pilot.pause()
        mode = app.query_one("#mode", Select)
        assert mode.value == "script"
        shown = str(mode.query_one(SelectCurrent).label)  # what the closed list shows
        assert shown == "your script: train.py --max-iters 10", shown
        for demos_own in ("#steps", "#batch", "#model", "#amp"):  # issue #43: none applies to a script
            assert not app.query_one(demos_own).display, demos_own
        app.query_one("#nproc", Input).value = "3"
        again = form.spec()
        assert (again.script, again.demo_args, again.nproc, again.stall_timeout) == (
            "train.py",
            ("--max-iters", "10"),
            3,
            9.0,
        )
        assert again.run_root == tmp_path and again.nice == UI_RANK_NICE
        mode.value = "ddp"  # a demo again: its steps and batch count
        await pilot.pause()
        assert app.query_one("#steps", Input).display and app.query_one("#model").display
        assert form.spec().mode == "ddp" and form.spec().script is None


@pytest.mark.parametrize("size", [(80, 24), (160, 50)])
async def test_a_comparisons_results_get_the_screen_at_80x24_and_f_brings_the_settings_back(size):
    """Issue #31: at 80x24 the results sat under the form's 14 rows, one table row in sight. Once a
    comparison starts there, the form folds to its buttons and status; f unfolds it and folds it
    again. A terminal of 50 rows keeps the whole form over the results."""
    from textual.widgets import DataTable, SelectionList

    from mgpu_tui.app.messages import CompareEnded, CompareStarted

    app = create_app(telemetry=[], topology=None)
    async with app.run_test(size=size) as pilot:
        await pilot.press("c")
        await pilot.pause(0.2)
        modes = app.query_one("#compare-modes", SelectionList)
        table = app.query_one("#compare-table", DataTable)
        assert modes.display and modes.region.height > 0
        comparison = pinned_comparison()
        app.to_views(CompareStarted(comparison))
        app.to_views(CompareEnded(comparison))
        await pilot.pause(0.3)
        short = size[1] < 40
        assert (modes.region.height == 0) is short
        last_row = table.region.y + 1 + len(comparison.rows)  # the header, then each mode's row
        if short:
            assert last_row <= app.size.height - 1, (table.region, app.size)  # every row above the footer
            await pilot.press("escape", "f")  # the keys are the app's, not a field's
            await pilot.pause(0.2)
            assert modes.region.height > 0
            await pilot.press("f")
            await pilot.pause(0.2)
            assert modes.region.height == 0


async def test_the_compare_view_says_what_the_cli_says_under_its_table():
    """Issue #43: on a busy machine the app starred a mode as fastest without a word, where the CLI
    says BUSY MACHINE; nor did it say what * and = mean. The CLI's notes are under the table."""
    import dataclasses

    from mgpu_tui.app.messages import CompareEnded, CompareStarted

    comparison = pinned_comparison()
    busy = "other processes used 1.3 of the 2 cores during the run: its timings are not to be trusted"
    rows = [dataclasses.replace(comparison.rows[0], busy=busy), *comparison.rows[1:]]
    comparison = dataclasses.replace(comparison, rows=rows)
    app = create_app(telemetry=[], topology=None)
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.press("c")
        app.to_views(CompareStarted(comparison))
        app.to_views(CompareEnded(comparison))
        await pilot.pause(0.3)
        notes = str(app.query_one("#compare-notes", Static).content)
        assert f"BUSY MACHINE, {rows[0].name}: {busy}." in notes
        assert "* best in its column" in notes and "= every rank measured exactly that" in notes


async def test_l_opens_the_logs_rank_filter_and_help_lists_it():
    """Issue #43: no key reached the rank filter, and `?` did not mention one."""
    from mgpu_tui.app.views.help import HelpScreen
    from mgpu_tui.app.widgets.log_view import LogView
    from mgpu_tui.engine.launch.spec import LaunchSpec

    app = create_app(telemetry=[], topology=None)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("r")
        spec = LaunchSpec("ddp", nproc=2, steps=10, device="cpu")
        show_started(app, spec)
        await pilot.pause(0.2)
        app.set_focus(None)
        await pilot.press("l")
        await pilot.pause(0.2)
        rank_filter = app.query_one("#log-rank", Select)
        assert app.query_one(LogView).display and rank_filter.has_focus_within and rank_filter.expanded
        await pilot.press("down", "down", "enter")  # all ranks, rank 0, rank 1
        await pilot.pause(0.2)
        assert rank_filter.value == 1
        await pilot.press("escape", "question_mark")
        await pilot.pause(0.2)
        assert isinstance(app.screen, HelpScreen)
        assert "l   Run view: the logs of one rank" in str(app.screen.query_one(Static).content)


async def test_a_run_that_has_not_stepped_says_for_how_long_and_why():
    """Issue #43: app runs sat at "starting" for 40-100 s on a busy machine with no time or cause
    shown. Until the first step the status line counts the seconds and names the ranks' priority."""
    from mgpu_tui.engine.launch.spec import LaunchSpec
    from mgpu_tui.engine.run.figures.aggregate import Aggregator

    app = create_app(telemetry=[], topology=None)
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.press("r")
        view = show_started(app, LaunchSpec("ddp", nproc=2, steps=10, device="cpu", nice=10))
        view._begun -= 42  # as if it had started 42 s ago
        view.show(Aggregator().stats(), ([], [], []), 30.0)
        await pilot.pause(0.2)
        status = str(app.query_one("#run-status", StatusLine).render())
        assert re.search(r"starting for 4[23] s \(its ranks run at nice 10", status), status


async def test_help_at_80x24_says_how_to_close_it_on_its_first_screen():
    """Issue #43: at 80x24, `?` told how to close it only after two pages."""
    from mgpu_tui.app.views.help import HelpScreen

    app = create_app(telemetry=[], topology=None)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("question_mark")
        await pilot.pause(0.2)
        assert isinstance(app.screen, HelpScreen)
        help_box = app.screen.query_one("#help")
        first_lines = str(app.screen.query_one(Static).content).splitlines()[:3]
        assert any("Escape or ? closes this help" in line for line in first_lines)
        assert help_box.virtual_size.height > help_box.size.height  # it does scroll: more than a page
        await pilot.press("escape")
        await pilot.pause(0.2)
        assert not isinstance(app.screen, HelpScreen)


async def test_the_runs_view_says_the_highlighted_runs_cause_whole_at_80_columns(tmp_path, monkeypatch):
    """Issue #43: the "root cause or reason" column started past column 80 and did not scroll. Under
    the table, the run under the cursor: its folder, its status and its cause, whole."""
    from mgpu_tui.app.views.runs import RunsView
    from mgpu_tui.engine.records.history import RecordStatus, RunRecord
    from mgpu_tui.engine.run.causes.rootcause import RootCause

    cause = RootCause(1, 3, 1, "RuntimeError: \x1b[2Jthe loss went NaN at step 3 of rank 1", "tb")
    failed = pinned_summary(tmp_path / "b", status="failed", exit_code=1, root_cause=cause)
    monkeypatch.setattr("mgpu_tui.app.views.runs.REFRESH_S", 3600.0)  # no listing replaces these rows
    ok = pinned_summary(tmp_path)
    records = [
        RunRecord(str(tmp_path / "20261126T100000Z-ddp"), 2.0, "ddp", 2, 1, RecordStatus.FAILED, failed),
        RunRecord(str(tmp_path / "20261126T090000Z-fsdp"), 1.0, "fsdp", 2, 1, RecordStatus.OK, ok),
    ]
    app = create_app(telemetry=[], topology=None, run_root=tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("h")
        title = app.query_one("#runs-title", Static)
        assert await wait_for(pilot, lambda: "No runs in" in str(title.content), timeout=10)  # read once
        view = app.query_one(RunsView)
        view.show(records)
        await pilot.pause(0.3)
        detail = app.query_one("#runs-detail", Static)
        said = str(detail.content)
        assert said.startswith("20261126T100000Z-ddp · failed: rank 1") and "NaN at step 3 of rank 1" in said
        assert "\x1b" not in said and detail.region.y < 24 and detail.region.height >= 1  # on screen
        await pilot.press("down")
        await pilot.pause(0.2)
        assert str(detail.content) == "20261126T090000Z-fsdp · ok"


async def test_x_stops_the_rank_the_logs_show_as_if_it_died_and_the_run_names_it(tmp_path, monkeypatch):
    """Issue #43: stopping one rank, not the whole run (as nvitop and k9s can). l chooses the rank,
    x asks, then that rank's process gets SIGTERM: torchrun sees it die and ends the others, and
    the root cause is that rank. Issue 56: named so from the first frame after the yes; on 8177ed0
    the table read "rank 0 failed / rank 1 running" for about 5 s (rank 0's error, its peer gone,
    came before the run's end named rank 1)."""
    from mgpu_tui.app.views.run.view import RunView

    monkeypatch.chdir(tmp_path)
    app = create_app()
    async with app.run_test(size=(160, 50)) as pilot:
        await start_ddp_in_the_form(app, pilot, "100000")
        view = app.query_one(RunView)
        assert await wait_for(pilot, lambda: len(app.jobs.runs.rank_processes()) == 2, timeout=90)
        pid = app.jobs.runs.rank_processes()[1][0]
        run_dir = app.jobs.runs.run.run_dir.path
        app.set_focus(None)
        await pilot.press("x")  # every rank's logs shown: which one?
        await pilot.pause(0.2)
        assert not isinstance(app.screen, Confirm)
        await pilot.press("l", "down", "down", "enter", "escape")  # rank 1's logs
        await pilot.pause(0.2)
        await pilot.press("x")
        await pilot.pause(0.3)
        assert isinstance(app.screen, Confirm)
        assert f"Stop rank 1 (pid {pid})?" in str(app.screen.query_one("Static").render())
        await pilot.press("y")
        frames: list[dict[str, str]] = []  # the table's states, each time it is looked at

        def ended() -> bool:
            frames.append({row[0]: row[1] for row in view.rank_table.rank_rows})
            return not app.jobs.runs.active

        assert await wait_for(pilot, ended, timeout=60, every=0.05)
        await pilot.pause(0.5)
        ended()
        assert view.failed_rank == 1, str(app.query_one("#root-cause", Static).render())
        assert "FAILED" in str(app.query_one("#run-status", StatusLine).render())
        assert all(frame["rank 1"] == "failed" for frame in frames), frames
        assert not any(frame["rank 0"] == "failed" for frame in frames), frames  # its peer gone: no peer
    assert live_processes_of(run_dir) == []


async def test_o_sorts_the_rank_table_by_each_column_in_turn():
    """Issue #43: the rank table could not be sorted. o sorts by samples/s (the slowest on top), then
    the step (the furthest behind), the loss (the highest), the peak memory (the most), and back."""
    from mgpu_tui.engine.launch.spec import LaunchSpec
    from mgpu_tui.engine.protocol.events import Hello, Step
    from mgpu_tui.engine.run.figures.aggregate import Aggregator

    events, now = Aggregator(), time.time()
    figures = {0: (10, 3000.0, 0.5, 300), 1: (8, 1000.0, 0.9, 500), 2: (12, 2000.0, 0.7, 400)}
    for rank, (steps, rate, loss, mib) in figures.items():
        events.add(Hello(rank, now - 9, rank, 3, 4000 + rank, "h", "cpu", None, "ddp"))
        for step in range(1, steps + 1):
            events.add(
                Step(rank, now - (steps - step) * 0.1, step, 32, 0, loss, 32 / rate, mib << 20, mib << 20)
            )
    app = create_app(telemetry=[], topology=None)
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.press("r")
        view = show_started(app, LaunchSpec("ddp", nproc=3, steps=100, batch_size=96, device="cpu"))
        view.show(events.stats(), ([], [], []), 30.0)
        app.set_focus(None)
        orders = []
        for _ in range(5):
            await pilot.press("o")
            await pilot.pause(0.1)
            orders.append((view.rank_table.sorted_by, [row[0] for row in view.rank_table.rank_rows]))
        assert orders == [
            ("samples/s", ["rank 1", "rank 2", "rank 0"]),
            ("step", ["rank 1", "rank 0", "rank 2"]),
            ("loss", ["rank 1", "rank 2", "rank 0"]),
            ("peak memory", ["rank 1", "rank 2", "rank 0"]),
            ("rank", ["rank 0", "rank 1", "rank 2"]),
        ]


async def test_the_logs_wrap_with_W_and_ctrl_s_saves_the_lines_shown(tmp_path, monkeypatch):
    """Issue #43: a log view that follows, wraps and saves (it only followed). W wraps long lines
    onto the rows under them; Ctrl+S writes the lines shown (this rank's) to a new file here, never
    over a file or through a link already there."""
    from mgpu_tui.app.widgets.log_pane import LogPane
    from mgpu_tui.engine.launch.spec import LaunchSpec

    monkeypatch.chdir(tmp_path)
    (tmp_path / "elsewhere").write_text("mine\n")
    app = create_app(telemetry=[], topology=None)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("r")
        spec = LaunchSpec("ddp", nproc=2, steps=10, device="cpu")
        view = show_started(app, spec, str(tmp_path / "runs" / "20261126T100000Z-ddp"))
        long = "x" * 150 + " the end"
        view.add_log_lines([(0, "stdout", "short"), (1, "stdout", long), (1, "stderr", "\x1b[2Jboom")], 0)
        await pilot.pause(0.3)
        pane = app.query_one(LogPane)
        assert pane.virtual_size.height == 3 and pane.virtual_size.width > 150
        app.set_focus(None)
        await pilot.press("W")
        await pilot.pause(1.2)  # (the pane's height grows once a second)
        assert pane.wrap and pane.virtual_size.height >= 5 and pane.virtual_size.width <= 80
        drawn = [strip.text for strip in pane.render_lines(pane.scrollable_content_region.reset_offset)]
        assert any(line.rstrip().endswith("the end") for line in drawn), drawn
        await pilot.press("l", "down", "down", "enter", "escape")  # rank 1's lines only
        await pilot.pause(0.2)
        (tmp_path / "mgpu-tui-log-20261126T100000Z-ddp-rank1.txt").symlink_to(tmp_path / "elsewhere")
        app.set_focus(None)
        await pilot.press("ctrl+s")
        await pilot.pause(0.3)
        saved = tmp_path / "mgpu-tui-log-20261126T100000Z-ddp-rank1-2.txt"
        assert saved.read_text() == f"rank 1 {long}\nrank 1 ^[[2Jboom\n"
        assert (tmp_path / "elsewhere").read_text() == "mine\n"  # the link's target untouched


async def test_the_form_takes_a_demos_own_arguments_as_after_double_dash(tmp_path):
    """Issue #43: the form had no field for a demo's own arguments (`run ddp -- --lr 0.2`)."""
    from mgpu_tui.app.views.run.form import RunForm
    from mgpu_tui.errors import UsageError

    app = create_app(telemetry=[], topology=None, run_root=tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("r")
        form = app.query_one(RunForm)
        field = app.query_one("#demo-args", Input)
        assert field.display and field.region.width >= 12  # on screen at 80 columns
        field.value = "--lr 0.2 --note 'two words'"
        assert form.spec().demo_args == ("--lr", "0.2", "--note", "two words")
        field.value = "--note 'unclosed"
        with pytest.raises(UsageError, match="the demo's own arguments cannot be read"):
            form.spec()


async def test_v_shows_the_guide_of_the_mode_that_runs_not_the_forms_last_choice():
    """The form, filled with a run started elsewhere (`run fsdp --tui`), posts no choice: the guide
    follows the run itself."""
    from mgpu_tui.app.widgets.mode_guide import ModeGuide
    from mgpu_tui.engine.launch.spec import LaunchSpec

    app = create_app(telemetry=[], topology=None)
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.press("r")
        assert app.query_one(ModeGuide).mode.name == "ddp"  # the form's first choice
        spec = LaunchSpec("fsdp", nproc=2, steps=10, device="cpu")
        show_started(app, spec)
        await pilot.pause(0.2)
        assert app.query_one(ModeGuide).mode.name == "fsdp"


async def test_a_views_keys_are_its_own_and_reach_it_only_while_it_is_shown():
    """Issue #44: each view declares its keys (BINDINGS); the app forwards them to the view shown,
    wherever the focus is, and a view left with the focus in one of its fields ignores them."""
    from textual.binding import Binding

    from mgpu_tui.app.views.compare import CompareView

    app = create_app(telemetry=[], topology=None)
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.press("c")
        await pilot.pause(0.2)
        code = app.query_one("#compare-code", Static)
        app.set_focus(app.query_one(CompareView).query_one(Select))  # a field of the Compare form
        await pilot.pause(0.1)
        before = code.display
        await pilot.press("t", "v")  # the Topology view is shown; the focus stayed in Compare's form
        await pilot.pause(0.2)
        assert code.display == before
        await pilot.press("c")
        await pilot.pause(0.2)
        app.set_focus(None)  # nothing has the focus: the view's key still reaches it
        await pilot.press("v")
        await pilot.pause(0.2)
        assert code.display != before
        app_keys = {b.key for b in Binding.make_bindings(app.BINDINGS)}
        for view in (RunView, CompareView):
            assert not app_keys & {b.key for b in Binding.make_bindings(view.BINDINGS)}, view


async def test_news_stops_at_the_views_and_recorded_telemetry_is_shown_in_full():
    """Issue #44: the app posts a worker's news on to each view (Textual's own dispatch); news
    that bubbled back up would reach the app again, and each recorded snapshot is drawn, none
    replaced by the next in the queue."""
    from mgpu_tui.app import messages

    news = [c for c in vars(messages).values() if isinstance(c, type) and issubclass(c, messages.News)]
    assert len(news) >= 9 and not any(c.bubble for c in news)
    assert messages.StartRequested.bubble  # what a view asks for goes up to the app
    first, second = (messages.TelemetryUpdated(snapshot, recorded=True) for snapshot in "ab")  # type: ignore[arg-type]
    assert not first.can_replace(second)
    assert messages.TelemetryUpdated("a").can_replace(messages.TelemetryUpdated("b"))  # type: ignore[arg-type]
