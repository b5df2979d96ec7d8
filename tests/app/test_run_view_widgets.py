"""The Run view's own widgets with Pilot: the log pane a user reads while lines pour in, the charts."""

from pathlib import Path

from textual.app import App, ComposeResult
from textual.widgets import Input, Select

from conftest import pinned_summary
from mgpu_tui.app.widgets.log_pane import LogPane, printable
from mgpu_tui.app.widgets.log_view import SHOWN, LogView
from mgpu_tui.engine.launch.spec import LaunchSpec, resolve
from mgpu_tui.engine.machine.host import Host
from mgpu_tui.engine.run.causes.rootcause import RootCause
from mgpu_tui.engine.run.summary import RunSummary
from mgpu_tui.engine.run.summary_facts import SHARED_GPUS_NOTE


class LogApp(App):
    def compose(self) -> ComposeResult:
        yield LogView(id="logs")

    def on_mount(self) -> None:
        self.query_one(LogView).reset(2)


def rows(pane: LogPane) -> list[str]:
    """The pane's rows as the screen shows them, trailing blanks dropped."""
    return [pane.render_line(y).text.rstrip() for y in range(pane.scrollable_content_region.height)]


def lines(start: int, stop: int, rank: int = 0) -> list[tuple[int, str, str]]:
    return [(rank, "stdout", f"line {i}") for i in range(start, stop)]


async def test_the_pane_follows_the_newest_lines_and_holds_still_when_scrolled_back():
    app = LogApp()
    async with app.run_test(size=(80, 16)) as pilot:
        view, pane = app.query_one(LogView), app.query_one(LogPane)
        view.add(lines(0, 3))
        await pilot.pause()
        assert rows(pane)[:4] == ["rank 0 line 0", "rank 0 line 1", "rank 0 line 2", ""]  # from the top

        view.add(lines(3, 500))
        await pilot.pause()
        shown = rows(pane)
        assert shown[-1] == "rank 0 line 499" and shown[0] == f"rank 0 line {500 - len(shown)}"

        await pilot.pause(1.1)  # the scrollable height catches up (at most once a second)
        pane.scroll_to(y=100, animate=False)
        await pilot.pause()
        assert not pane.following and rows(pane)[0] == "rank 0 line 100"
        view.add(lines(500, 600))
        await pilot.pause()
        assert rows(pane)[0] == "rank 0 line 100"  # reading back: the new lines do not move it

        view.add(lines(600, SHOWN + 50))  # the pane is full: the 50 oldest lines leave it
        await pilot.pause()
        assert pane.entries[0][2] == "line 50" and rows(pane)[0] == "rank 0 line 100"  # still held
        view.add(lines(SHOWN + 50, 2 * SHOWN + 50))  # what was read has left: the oldest kept shows
        await pilot.pause()
        assert rows(pane)[0] == f"rank 0 line {SHOWN + 50}"

        await pilot.pause(1.1)
        pane.scroll_end(animate=False, immediate=True)
        await pilot.pause()
        assert pane.following
        view.add(lines(5000, 5001))
        await pilot.pause()
        assert rows(pane)[-1] == "rank 0 line 5000"


async def test_keys_scroll_back_and_end_follows_again():
    app = LogApp()
    async with app.run_test(size=(80, 16)) as pilot:
        view, pane = app.query_one(LogView), app.query_one(LogPane)
        view.add(lines(0, 300))
        await pilot.pause(1.1)  # the scrollable height has caught up
        pane.focus()
        await pilot.press("pageup")
        assert not pane.following
        held = rows(pane)[0]
        view.add(lines(300, 310))
        await pilot.pause()
        assert rows(pane)[0] == held
        await pilot.press("end")
        await pilot.pause()
        assert pane.following and rows(pane)[-1] == "rank 0 line 309"


async def test_rank_filter_search_and_the_note_of_lines_not_shown():
    app = LogApp()
    async with app.run_test(size=(80, 16)) as pilot:
        view, pane = app.query_one(LogView), app.query_one(LogPane)
        view.add(
            [(0, "stdout", "loss 0.5"), (1, "stdout", "loss 0.6"), (1, "stderr", "warning: slow")],
            dropped=1200,
        )
        await pilot.pause()
        assert rows(pane)[:4] == [
            "… 1,200 lines not shown here (every line is in the run's log files)",
            "rank 0 loss 0.5",
            "rank 1 loss 0.6",
            "rank 1 warning: slow",
        ]
        view.query_one("#log-rank", Select).value = 1
        await pilot.pause()
        assert [r for r in rows(pane) if r][1:] == ["rank 1 loss 0.6", "rank 1 warning: slow"]
        view.query_one("#log-search", Input).value = "WARN"
        await pilot.pause()
        assert [r for r in rows(pane) if r][1:] == ["rank 1 warning: slow"]
        stderr_text = next(seg for seg in pane.render_line(1) if seg.text.startswith("warning"))
        assert stderr_text.style.color.name == "red"


async def test_lines_that_arrive_while_the_view_is_hidden_show_when_it_shows():
    app = LogApp()
    async with app.run_test(size=(80, 16)) as pilot:
        view, pane = app.query_one(LogView), app.query_one(LogPane)
        view.add(lines(0, 2))
        view.display = False  # another tab
        await pilot.pause()
        view.add(lines(2, 9000, rank=1))  # more than the view keeps
        await pilot.pause()
        assert len(pane.entries) == 2  # nothing drawn meanwhile
        view.display = True
        await pilot.pause(0.2)  # drawn once the refresh has put the view back on screen
        assert rows(pane)[-1] == "rank 1 line 8999" and len(pane.entries) == SHOWN


def test_a_line_reads_as_a_terminal_would_leave_it():
    assert printable("epoch 1 10%\repoch 1 50%\repoch 1 100%") == "epoch 1 100%"  # a progress bar
    assert printable("done\r") == "done"  # CRLF
    assert printable("a\tb") == "a       b"
    # shown, not obeyed (the one sink, protocol/text.py): C0 as ^X, C1 as \\x9b
    assert printable("bell\x07 and \x1b[31mred\x1b[0m\x9b") == "bell^G and ^[[31mred^[[0m\\x9b"


def test_a_chart_is_rows_of_blocks_from_the_series_minimum_to_its_maximum():
    from mgpu_tui.app.widgets.bars import spark_rows

    # 1..4 over two rows of eighths: 1, 6, 11 and 16 eighths high, right-aligned in 6 columns.
    assert spark_rows([1, 2, 3, 4], 6, 2).plain.split("\n") == ["    ▃█", "  ▁▆██"]
    assert spark_rows([7, 7], 3, 1).plain == " ▄▄"  # a steady series sits at half height
    assert spark_rows([], 3, 2).plain == "   \n   "


async def test_a_chart_says_what_its_bars_span_over_the_steps_that_fit():
    from mgpu_tui.app.widgets.chart import Chart
    from mgpu_tui.console import fmt_rate

    class ChartApp(App):
        def compose(self) -> ComposeResult:
            yield Chart("throughput (samples/s)", fmt_rate)

    app = ChartApp()
    async with app.run_test(size=(80, 4)) as pilot:
        chart = app.query_one(Chart)
        chart.update([])
        await pilot.pause()
        assert chart.render().plain.split("\n")[0] == "throughput (samples/s)"  # nothing to span yet
        chart.update([5000.0] + [1000.0 + i for i in range(80)])  # the first value does not fit
        await pilot.pause()
        title, *bars = chart.render().plain.split("\n")
        assert title == "throughput (samples/s), last 80 steps · now 1,079 · range 1,000 to 1,079"
        assert len(bars) == 3 and all(len(row) == 80 for row in bars)
    narrow = ChartApp()
    async with narrow.run_test(size=(40, 4)) as pilot:  # too narrow for it all: the title keeps to its row
        chart = narrow.query_one(Chart)
        chart.update([1000.0 + i for i in range(40)])
        await pilot.pause()
        title, *bars = chart.render().plain.split("\n")
        assert title == "throughput (samples/s), last 40 steps" and len(bars) == 3


ONE_GPU = Host(cpu_count=16, gpu_count=1, gpu_note="1 GPU(s)", torch_available=True)


def failed_summary(cause) -> RunSummary:
    """A ddp run on ranks that shared a GPU, failed at step 3 of 100 with ``cause``."""
    return pinned_summary(
        Path("/runs/x"),
        status="failed",
        exit_code=1,
        device="cuda",
        shared_gpus=True,
        steps=3,
        steps_requested=100,
        samples_per_s=None,
        step_time_s_median=None,
        step_time_s_p10_p90=None,
        final_loss=None,
        peak_mem_bytes=(None, None),
        ranks=(),
        launch_to_first_step_s=None,
        duration_s=1.0,
        root_cause=cause,
        note=SHARED_GPUS_NOTE,
    )


class RunViewApp(App):
    def compose(self) -> ComposeResult:
        from mgpu_tui.app.views.run.view import RunView

        yield RunView(ONE_GPU)


async def test_a_run_on_shared_gpus_says_so_and_a_failure_takes_the_panel_over():
    from textual.widgets import Static

    from mgpu_tui.app.views.run.view import RunView

    app = RunViewApp()
    async with app.run_test(size=(160, 50)) as pilot:
        view = app.query_one(RunView)
        assert app.query_one("#share-gpus").display  # a GPU here: the form offers sharing it
        spec = LaunchSpec("ddp", nproc=2, steps=100, device="cuda", share_gpus=True)
        resolved = resolve(spec, ONE_GPU)
        view.started(spec, resolved, "/runs/x", note=SHARED_GPUS_NOTE)
        await pilot.pause()
        panel = app.query_one("#root-cause", Static)
        assert panel.display and panel.has_class("note")
        assert "say nothing about a box with a GPU for each rank" in str(panel.render())
        view.ended(failed_summary(RootCause(1, 1, None, "boom", "tb")), None)
        await pilot.pause()
        assert panel.display and not panel.has_class("note") and "Root cause: rank 1" in str(panel.render())
        view.started(spec, resolved, "/runs/y")  # a run with nothing to note: no panel
        await pilot.pause()
        assert not panel.display


async def test_a_text_panel_shows_gloo_messages_and_paths_as_text_never_as_markup():
    """The Compare view's status is a TextPanel: gloo's own messages start with a [path]."""
    from mgpu_tui.app.widgets.text_panel import TextPanel

    class PanelApp(App):
        def compose(self) -> ComposeResult:
            yield TextPanel(id="panel")

    app = PanelApp()
    async with app.run_test(size=(100, 5)) as pilot:
        panel = app.query_one(TextPanel)
        message = (
            "ddp failed: [/__w/pytorch/third_party/gloo/pair.cc:553] Connection closed by peer [bold]\x1b[2J"
        )
        panel.update(message)
        await pilot.pause()
        assert str(panel.render()) == message.replace("\x1b", "^[")
        assert "[/__w/pytorch" in app.export_screenshot()


async def test_at_80_columns_the_status_line_keeps_the_stop_key_and_shrinks_its_bar():
    """Issue #31: at 80x24 the bar took 40 columns and cut the words before "(s stops it)"."""
    from mgpu_tui.app.widgets.status_line import MIN_BAR_WIDTH, StatusLine

    class LineApp(App):
        def compose(self) -> ComposeResult:
            yield StatusLine()

    app = LineApp()
    async with app.run_test(size=(80, 3)) as pilot:
        line = app.query_one(StatusLine)
        line.update("ddp on 2 ranks (s stops it)   step 716/3,000   2,392 samples/s   loss 0.4541", 0.24)
        await pilot.pause()
        drawn = line.render().plain
        # Issue #43: the loss was cut for a bar; where words and a bar cannot both fit, the words win.
        words = "ddp on 2 ranks (s stops it)   step 716/3,000   2,392 samples/s   loss 0.4541"
        assert drawn.startswith(words)
        assert drawn.endswith(" 24%") and "━" not in drawn and len(drawn) <= 80
        line.update("ddp on 2 ranks (s stops it)   step 716/3,000", 0.24)
        await pilot.pause()
        drawn = line.render().plain
        assert MIN_BAR_WIDTH <= drawn.count("━") < 40 and len(drawn) <= 80
        line.update("short", 0.5)
        await pilot.pause()
        assert line.render().plain.count("━") == 40  # room enough: the whole bar


async def test_a_smoothed_chart_names_its_line_on_the_axis_row_in_the_lines_colour():
    """Issue #31: the orange line over the bars had no legend."""
    from mgpu_tui.app.widgets.chart import LINE_STYLE, Chart

    class ChartApp(App):
        def compose(self) -> ComposeResult:
            yield Chart("loss", smoothed=True)
            yield Chart("throughput")

    app = ChartApp()
    async with app.run_test(size=(40, 8)) as pilot:
        smoothed, plain_chart = app.query(Chart)
        for chart in (smoothed, plain_chart):
            chart.update([1.0 + (i % 5) / 10 for i in range(60)], steps=list(range(1, 61)))
        await pilot.pause()
        axis = smoothed.render().split("\n")[-1]
        assert axis.plain.startswith("step 21") and "─ smoothed" in axis.plain and axis.plain.endswith("60")
        legend = axis.plain.index("─ smoothed")
        assert any(span.start <= legend < span.end and str(span.style) == LINE_STYLE for span in axis.spans)
        assert "smoothed" not in plain_chart.render().split("\n")[-1].plain  # no line, no legend
