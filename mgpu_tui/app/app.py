"""The mgpu-tui app: Dashboard, Topology, Run, Compare and Runs, fed by threads that only post messages.

:func:`create_app` is the one factory the CLI and the tests use. Inputs can be
given instead of read live (a topology, recorded telemetry), so views can be
tested on machines this one is not.

The first frame needs only Textual: what reads the machine (NVML, psutil, the
topology) loads and starts once that frame is up, and each view but the
Dashboard is built the first time it shows.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from platformdirs import user_downloads_path
from textual import on
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.widget import Widget
from textual.widgets import Footer, Header, Tab, Tabs

from mgpu_tui.app.jobs import Jobs
from mgpu_tui.app.machine_feed import MachineFeed
from mgpu_tui.app.messages import (
    CompareEnded,
    CompareRequested,
    CompareStarted,
    CompareUpdated,
    ComparisonRequested,
    OpenRequested,
    RunEnded,
    RunOpened,
    RunStarted,
    RunUpdated,
    StartRequested,
    StopRequested,
    TelemetryUpdated,
    TopologyRead,
)
from mgpu_tui.app.views.switcher import TABS, ViewContext, ViewSwitcher, new_view
from mgpu_tui.engine.launch.options import RUN_ROOT
from mgpu_tui.engine.launch.spec import LaunchSpec
from mgpu_tui.engine.machine import host as host_module

if TYPE_CHECKING:  # psutil and NVML load after the first frame, with the sampler and the topology
    from mgpu_tui.engine.machine.telemetry import Snapshot

_LIVE = object()  # "read it from this machine"

# What was read of the machine: the latest of each kind is handed again to a view built later.
KEPT = (TelemetryUpdated, TopologyRead)


def freeze_heap() -> None:
    """Move what exists now out of the collector's sight, and turn collection back on.

    The widgets, styles and modules of the app live as long as it does; a full collection
    no longer walks them all: measured, that cut its pauses in the middle of a frame from up
    to 72 ms to under 6. (tui_command turns the collector off while the first screen is built.)
    """
    gc.freeze()
    gc.enable()


class MgpuApp(App):
    # Focus you can see: the focused control looks unlike its unfocused self by 3:1 or more, in every
    # view at every size (Textual's own marks differ by one shade where a control has no border, at
    # 80 columns, and not at all on a table or a scrolled box). tests/app/test_focus.py reads it.
    CSS = """
    Input.-textual-compact:focus, Select.-textual-compact:focus > SelectCurrent {
        background: $primary;
        color: $text;
    }
    /* A list's cursor row shows while the list has focus (unfocused, Textual's dimmer cursor was
       one shade from the focused one) */
    TickList > .option-list--option-highlighted {
        background: $surface;
        color: $foreground;
    }
    TickList:focus > .option-list--option-highlighted,
    TickBox.-textual-compact:focus > .toggle--label {
        background: $primary;
        color: $text;
    }
    DataTable:focus > .datatable--header {
        background: $primary;
        color: $text;
    }
    #gpus, #compare-results {
        border-left: blank;
    }
    #gpus:focus, #compare-results:focus {
        border-left: outer $primary;
    }
    #guide-text:focus, #guide-source:focus, LogPane:focus {
        border: round $accent;
    }
    /* A list field's choice on its one row, cut with … (at 80 columns "fsdp_grad_op: on the CPU
       with gloo" took two, and pushed the form down). */
    SelectCurrent Static#label {
        text-wrap: nowrap;
        text-overflow: ellipsis;
    }
    """
    TITLE = "mgpu-tui"
    SUB_TITLE = "every PyTorch multi-GPU strategy, on this machine"
    BINDINGS = [
        # The footer shows these in this order, as many as fit: quit and stop first (at 80 columns
        # the last ones are cut; the tabs above name the views). Each view's own keys are its
        # BINDINGS: they are added here as the view is built (take_in), so that they reach the view
        # shown even when nothing inside it has focus (the tabs, or no widget).
        ("q", "quit_app", "Quit"),
        ("s", "stop_run", "Stop"),
        ("question_mark", "help", "Help"),
        ("d", "show_tab('dashboard')", "Dashboard"),
        ("t", "show_tab('topology')", "Topology"),
        ("r", "show_tab('run')", "Run"),
        ("c", "show_tab('compare')", "Compare"),
        ("h", "show_tab('runs')", "Runs"),
        # Typing in a field takes letters; Escape leaves the field so the keys above work again.
        Binding("escape", "leave_field", "Leave field", show=False),
    ]

    def __init__(
        self,
        *,
        start: LaunchSpec | None = None,
        topology=_LIVE,
        telemetry: Iterable[Snapshot] | None = None,
        interval: float = 1.0,
        host: host_module.Host | None = None,
        open_run: Path | None = None,
        run_root: Path = RUN_ROOT,
        host_layout=None,
    ) -> None:
        super().__init__()
        if "TEXTUAL_ANIMATIONS" not in os.environ:
            # A sliding tab underline costs a dozen frames per key press, which a machine whose
            # cores the ranks fill cannot spare. TEXTUAL_ANIMATIONS=full brings it back.
            self.animation_level = "none"
        self.start_spec = start
        self.open_path = open_run  # a run folder to show at once (mgpu-tui open)
        self.context = ViewContext(lambda: self.host, run_root, host_layout)
        self._host = host
        self._latest: dict[type[Message], Message] = {}  # of the KEPT kinds, for views built later
        if topology is not _LIVE:
            self._latest[TopologyRead] = TopologyRead(topology, "")
        self._recorded = list(telemetry) if telemetry is not None else None
        self.jobs = Jobs(self, lambda: self.host)  # the app's own run or comparison, or a followed run
        self.feed = MachineFeed(self, interval, self.jobs.rank_processes)
        self._forwarded: dict[str, str] = {}  # a view's key -> its action, forwarded to the view shown

    @property
    def host(self) -> host_module.Host:
        """What this machine can run (GPUs, torch), probed when first asked: the Run and Compare
        forms need it, the first frame does not. By then the sampler has usually asked NVML already."""
        if self._host is None:
            self._host = host_module.probe()
        return self._host

    def compose(self) -> ComposeResult:
        yield Header()
        initial = "run" if self.start_spec or self.open_path else "dashboard"
        yield Tabs(*(Tab(title, id=tab) for tab, title in TABS.items()), active=initial, id="tabs")
        with ViewSwitcher(self.context, initial=f"{initial}-view", id="views"):
            yield new_view("dashboard", self.context)
            if initial == "run":
                yield new_view("run", self.context)
        yield Footer()

    def on_mount(self) -> None:
        for view in self.query_one(ViewSwitcher).children:
            self._forward_keys(view)
        self.call_after_refresh(self._after_first_frame)
        for snapshot in self._recorded or ():  # recorded telemetry is shown in full, in order
            self.to_views(TelemetryUpdated(snapshot, recorded=True))
        if self.start_spec is not None:
            self.start_run(self.start_spec)
        elif self.open_path is not None:
            self.call_later(self.open_run, self.open_path)

    def _after_first_frame(self) -> None:
        """Start reading the machine (machine_feed.py), now that the first frame is up."""
        freeze_heap()
        if self._recorded is None:
            self.feed.start_telemetry()
        if TopologyRead not in self._latest:
            self.feed.read_topology()

    # ---- the views -------------------------------------------------------------------------

    def _views(self) -> ViewSwitcher | None:
        """The views (None after the app closed: a worker's late message then finds none)."""
        switchers = self.query(ViewSwitcher)
        return switchers.first() if switchers else None

    @on(RunStarted)
    @on(RunOpened)
    @on(RunUpdated)
    @on(RunEnded)
    @on(CompareStarted)
    @on(CompareUpdated)
    @on(CompareEnded)
    @on(TelemetryUpdated)
    @on(TopologyRead)
    def to_views(self, message: Message) -> None:
        """A worker's news (or a request for a view), to each view built so far that handles it."""
        if isinstance(message, KEPT):
            self._latest[type(message)] = message
        if isinstance(message, (RunStarted, RunOpened, RunEnded, CompareStarted, CompareEnded)):
            self.call_after_refresh(self._refresh_keys)  # s offered only while there is work to stop
            self.set_timer(1.0, self._refresh_keys)  # (an end's thread finishes just after posting it)
        views = self._views()
        for view in views.children if views else ():
            view.post_message(message)  # News does not bubble: it stops at the view

    def _refresh_keys(self) -> None:
        """The footer's keys again; nothing once the app is closing (a timer may fire after its
        last screen went)."""
        if self.is_running and self.screen_stack:
            self.refresh_bindings()

    async def on_tabs_tab_activated(self, event: Tabs.TabActivated) -> None:
        """A tab chosen with the mouse or the arrow keys (the letter keys come through show_tab)."""
        if event.tab.id is not None:
            await self.action_show_tab(event.tab.id)

    async def action_show_tab(self, tab: str) -> None:
        await self._show(tab)

    async def _show(self, tab: str) -> Widget:
        """The tab's view, shown; built the first time, then told what was read of the machine
        before it existed, and its keys forwarded."""
        self.query_one(Tabs).active = tab
        view, built = await self.query_one(ViewSwitcher).show(tab)
        if built:
            self._forward_keys(view)
            for message in self._latest.values():
                view.post_message(message)
            self.call_after_refresh(freeze_heap)
        return view

    def _forward_keys(self, view: Widget) -> None:
        """Bind the view's own keys (its BINDINGS) here too, each to ``view(action)``: the view shown
        then gets them wherever the focus is. A key means one action in every view that binds it."""
        for binding in Binding.make_bindings(view.BINDINGS):
            known = self._forwarded.get(binding.key)
            if known is None:
                self._forwarded[binding.key] = binding.action
                self.bind(
                    binding.key, f"view({binding.action!r})", description=binding.description, show=False
                )
            elif known != binding.action:
                raise ValueError(
                    f"{type(view).__name__} binds {binding.key!r} to {binding.action!r}, "
                    f"another view to {known!r}"
                )

    async def action_view(self, action: str) -> None:
        """A view's key: its action, in the view shown (Textual's own dispatch; a view without
        that action ignores it)."""
        views = self._views()
        if views and (view := views.shown()):
            await self.run_action(action, view)

    def action_leave_field(self) -> None:
        self.set_focus(None)

    def action_help(self) -> None:
        from mgpu_tui.app.views.help import HelpScreen

        self.push_screen(HelpScreen())

    def deliver_screenshot(
        self, filename: str | None = None, path: str | None = None, time_format: str | None = None
    ) -> str | None:
        """The palette's screenshot: into ~/Downloads where there is one, else the current folder
        (Textual's default folder alone failed where no Downloads folder exists)."""
        if path is None:
            downloads = user_downloads_path()
            path = str(downloads if downloads.is_dir() else Path.cwd())
        return super().deliver_screenshot(filename, path, time_format)

    # ---- what the views ask for: jobs.py does it ---------------------------------------------

    def start_run(self, spec: LaunchSpec) -> None:
        if self.jobs.start(spec):
            self.set_focus(None)  # the form's field goes away with the form: the keys are the app's again
            self.query_one(Tabs).active = "run"  # the Run view is built: the switch follows at once

    def on_start_requested(self, message: StartRequested) -> None:
        self.start_run(message.spec)

    async def open_run(self, path: Path) -> None:
        if self.jobs.may_open():
            await self.action_show_tab("run")
            self.jobs.open(path)

    async def on_open_requested(self, message: OpenRequested) -> None:
        await self.open_run(message.path)

    async def on_comparison_requested(self, message: ComparisonRequested) -> None:
        """The Runs view's m: that comparison again, in the Compare view (which reads it back)."""
        from mgpu_tui.app.views.compare import CompareView

        view = await self._show("compare")
        assert isinstance(view, CompareView)
        view.show_past(message.comparison, message.paths)

    def on_compare_requested(self, message: CompareRequested) -> None:
        self.jobs.compare(message.modes, message.template)

    def on_stop_requested(self, message: StopRequested) -> None:
        self.jobs.stop()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """The footer offers s only while there is something to stop (the app's own work, or a run it
        follows); at 80 columns its place shows h Runs."""
        if action == "stop_run":
            jobs = getattr(self, "jobs", None)
            return jobs is not None and (jobs.busy or jobs.runs.following)
        return True

    def action_stop_run(self) -> None:
        self.jobs.stop()

    def action_quit_app(self) -> None:
        self.jobs.quit()

    async def action_quit(self) -> None:
        """Ctrl+Q (Textual's quit) asks as q does while a run goes: never a run stopped unasked."""
        self.jobs.quit()

    def action_help_quit(self) -> None:
        """Ctrl+C outside a field (Textual's hint to press Ctrl+Q): a quit, asked as q asks."""
        self.jobs.quit()

    def on_run_ended(self, message: RunEnded) -> None:
        self.clear_notifications()  # "Stopping every rank…" is over: the result panel says how it ended
        self.jobs.ended(run=True)

    def on_compare_ended(self, message: CompareEnded) -> None:
        self.jobs.ended(run=False)

    def on_unmount(self) -> None:
        self.feed.stop()
        self.jobs.close()


def create_app(**kwargs) -> MgpuApp:
    return MgpuApp(**kwargs)
