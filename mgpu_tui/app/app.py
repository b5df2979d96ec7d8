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
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.widgets import Footer, Header, Tab, Tabs

from mgpu_tui.app.compare_controller import CompareController
from mgpu_tui.app.machine_feed import MachineFeed
from mgpu_tui.app.messages import (
    CompareEnded,
    CompareRequested,
    CompareUpdated,
    ComparisonRequested,
    OpenRequested,
    RunEnded,
    RunUpdated,
    StartRequested,
    StopRequested,
    TelemetryUpdated,
    TopologyRead,
)
from mgpu_tui.app.run_controller import RunController
from mgpu_tui.app.views.dashboard import Dashboard
from mgpu_tui.app.views.switcher import TABS, ViewSwitcher, new_view
from mgpu_tui.console import plain
from mgpu_tui.engine.launch.spec import EnvironmentUnusable, LaunchSpec, SpecError
from mgpu_tui.engine.machine import host as host_module
from mgpu_tui.engine.protocol.rundir import RunDirError
from mgpu_tui.errors import UsageError

if TYPE_CHECKING:  # psutil and NVML load after the first frame, with the sampler and the topology
    from mgpu_tui.app.views.compare import CompareView
    from mgpu_tui.app.views.run import RunView
    from mgpu_tui.engine.machine.telemetry import Snapshot
    from mgpu_tui.engine.machine.topology import Topology

_LIVE = object()  # "read it from this machine"


def freeze_heap() -> None:
    """Move what exists now out of the collector's sight, and turn collection back on.

    The widgets, styles and modules of the app live as long as it does; a full collection
    no longer walks them all: measured, that cut its pauses in the middle of a frame from up
    to 72 ms to under 6. (tui_command turns the collector off while the first screen is built.)
    """
    gc.freeze()
    gc.enable()


class MgpuApp(App):
    TITLE = "mgpu-tui"
    SUB_TITLE = "every PyTorch multi-GPU strategy, on this machine"
    BINDINGS = [
        # The footer shows these in this order, as many as fit: quit and stop first (at 80 columns
        # the last ones are cut; the tabs above name the views).
        ("q", "quit_app", "Quit"),
        ("s", "stop_run", "Stop"),
        ("question_mark", "help", "Help"),
        ("d", "show_tab('dashboard')", "Dashboard"),
        ("t", "show_tab('topology')", "Topology"),
        ("r", "show_tab('run')", "Run"),
        ("c", "show_tab('compare')", "Compare"),
        ("h", "show_tab('runs')", "Runs"),
        Binding("g", "next_gpu", "Next GPU", show=False),
        Binding("v", "toggle_guide", "Guide", show=False),
        Binding("w", "toggle_whole", "Whole run", show=False),
        Binding("slash", "search_logs", "Search logs", show=False),
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
        run_root: Path = Path("runs"),
        host_layout=None,
    ) -> None:
        super().__init__()
        if "TEXTUAL_ANIMATIONS" not in os.environ:
            # A sliding tab underline costs a dozen frames per key press, which a machine whose
            # cores the ranks fill cannot spare. TEXTUAL_ANIMATIONS=full brings it back.
            self.animation_level = "none"
        self.start_spec = start
        self.open_path = open_run  # a run folder to show at once (mgpu-tui open)
        self.run_root = run_root  # where the Runs view looks
        self.host_layout = host_layout  # given, or read from this machine when first shown
        self._host = host
        # The topology to show: given, or read from this machine once the first frame is up.
        self._topology: tuple[Topology | None, str] | None = None if topology is _LIVE else (topology, "")
        self._recorded = list(telemetry) if telemetry is not None else None
        self._last_snapshot: Snapshot | None = None  # for a view built later (Compare's memory plan)
        self.controller = RunController(self)
        self.comparing = CompareController(self, lambda: self.host)
        self.feed = MachineFeed(self, interval, self._rank_processes)
        self._quitting = False

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
        with ViewSwitcher(lambda: self.host, self.run_root, initial=f"{initial}-view", id="views"):
            yield Dashboard(host_layout=self.host_layout, id="dashboard-view")
            if initial == "run":
                yield new_view("run", lambda: self.host, self.run_root)
        yield Footer()

    async def on_tabs_tab_activated(self, event: Tabs.TabActivated) -> None:
        """A tab chosen with the mouse or the arrow keys (the letter keys come through show_tab)."""
        if event.tab.id is not None:
            await self._show_view(event.tab.id)

    async def _show_view(self, tab: str) -> None:
        views = self.query_one(ViewSwitcher)
        _, built = await views.show(tab)
        if not built:
            return
        if topology := views.topology_view():
            topology.host_layout = self.host_layout
            if self._topology is not None:
                topology.show(*self._topology)
            else:
                topology.reading()
        if (compare := views.compare_view()) and tab == "compare" and self._last_snapshot is not None:
            compare.machine_memory(self._last_snapshot)
        self.call_after_refresh(freeze_heap)

    def _views(self) -> ViewSwitcher | None:
        """The views (None after the app closed: a worker's late message then finds none)."""
        switchers = self.query(ViewSwitcher)
        return switchers.first() if switchers else None

    def _run_view(self) -> RunView | None:
        """The Run view; None before its tab first showed (or after the app closed)."""
        views = self._views()
        return views.run_view() if views else None

    def _compare_view(self) -> CompareView | None:
        views = self._views()
        return views.compare_view() if views else None

    def on_mount(self) -> None:
        self.call_after_refresh(self._after_first_frame)
        if self._recorded is not None:
            # Recorded telemetry is shown in full, in order: no message may replace another.
            for snapshot in self._recorded:
                self.query_one(Dashboard).show(snapshot)
                self._last_snapshot = snapshot
        if self.start_spec is not None:
            self.start_run(self.start_spec)
        elif self.open_path is not None:
            self.call_later(self.open_run, self.open_path)

    def _after_first_frame(self) -> None:
        """Start reading the machine (machine_feed.py), now that the first frame is up."""
        freeze_heap()
        if self._recorded is None:
            self.feed.start_telemetry()
        if self._topology is None:
            self.feed.read_topology()

    def on_topology_read(self, message: TopologyRead) -> None:
        self._topology = (message.topology, message.reason)
        if (views := self._views()) and (view := views.topology_view()):
            view.show(message.topology, message.reason)

    # ---- messages from the workers ---------------------------------------------------

    # Worker threads may post after the app began to close and its views are gone;
    # such late messages are dropped.

    def on_telemetry_updated(self, message: TelemetryUpdated) -> None:
        self._last_snapshot = message.snapshot
        for dashboard in self.query(Dashboard):
            dashboard.show(message.snapshot)
        if view := self._compare_view():
            view.machine_memory(message.snapshot)  # what its memory plan is checked against

    def on_run_updated(self, message: RunUpdated) -> None:
        view = self._run_view()
        if view is None:
            return
        view.show(
            message.stats,
            message.series,
            message.stall_after,
            message.whole,
            message.nodes,
            message.stalled,
            message.machines,
        )
        if message.telemetry is not None:
            view.show_telemetry(message.telemetry)
        # Log lines are drained here, on the UI thread, not carried by the message: a newer
        # RunUpdated replaces a waiting one, and the lines it carried would be lost.
        view.add_log_lines(*self.controller.drain_log_lines())

    def on_run_ended(self, message: RunEnded) -> None:
        if self._quitting and not self.comparing.active:
            self.exit()
        view = self._run_view()
        if view is None:
            return
        view.add_log_lines(*self.controller.drain_log_lines())
        run = self.controller.run
        view.ended(message.summary, run.stats() if run else None)
        self.clear_notifications()  # "Stopping every rank…" is over: the result panel says how it ended

    def on_compare_updated(self, message: CompareUpdated) -> None:
        if view := self._compare_view():
            view.show(message.rows, message.progress)

    def on_compare_ended(self, message: CompareEnded) -> None:
        if self._quitting and not self.controller.active:
            self.exit()
        if view := self._compare_view():
            view.ended(message.comparison)

    def _rank_processes(self) -> dict[int, tuple[int, str | None]]:
        """The ranks the Dashboard shows: the run's, or the comparison's current run's."""
        return self.controller.rank_processes() or self.comparing.rank_processes()

    @property
    def busy(self) -> bool:
        """A run or comparison of the app's own is going (a run it only follows does not count)."""
        return self.controller.owns_active or self.comparing.active

    # ---- starting and stopping -----------------------------------------------------------

    def start_run(self, spec: LaunchSpec) -> None:
        if self.comparing.active:
            self.notify("A comparison is going; stop it first (s).", title="Cannot start", severity="error")
            return
        try:
            self.controller.start(spec)
        except (SpecError, EnvironmentUnusable, RunDirError, UsageError) as exc:
            self.notify(plain(str(exc)), title="Cannot start", severity="error", timeout=8, markup=False)
            return
        run = self.controller.run
        from mgpu_tui.engine.run.lifecycle import Run  # loaded by the start, not with the first frame
        from mgpu_tui.engine.run.summary import run_note

        view = self._run_view()
        if view is not None and isinstance(run, Run):
            view.started(spec, run.resolved, str(run.run_dir.path), note=run_note(run.resolved))
        self.set_focus(None)  # the form's field goes away with the form: the keys are the app's again
        self.query_one(Tabs).active = "run"  # the Run view is built: the switch follows at once

    def on_start_requested(self, message: StartRequested) -> None:
        self.start_run(message.spec)

    async def open_run(self, path: Path) -> None:
        """Show a run from its folder: a finished one replayed, a live one followed (never owned)."""
        if self.busy:
            self.notify(
                "A run of this app is going; stop it first (s).", title="Cannot open", severity="error"
            )
            return
        from mgpu_tui.engine.records.history import RecordError

        await self.action_show_tab("run")
        try:
            run = self.controller.follow(path)
        except RecordError as exc:
            self.notify(plain(str(exc)), title="Cannot open", severity="error", timeout=8, markup=False)
            return
        if view := self._run_view():
            view.opened(run)

    async def on_open_requested(self, message: OpenRequested) -> None:
        await self.open_run(message.path)

    async def on_comparison_requested(self, message: ComparisonRequested) -> None:
        """The Runs view's m: that comparison again, in the Compare view (which reads it back)."""
        await self.action_show_tab("compare")
        if view := self._compare_view():
            view.show_past(message.comparison, message.paths)

    def on_compare_requested(self, message: CompareRequested) -> None:
        if self.busy:
            self.notify("A run is going; stop it first (s).", title="Cannot compare", severity="error")
            return
        try:
            comparison = self.comparing.start(message.modes, message.template)
        except (SpecError, EnvironmentUnusable) as exc:
            self.notify(plain(str(exc)), title="Cannot compare", severity="error", timeout=8, markup=False)
            return
        if view := self._compare_view():
            view.started(comparison)

    def on_stop_requested(self, message: StopRequested) -> None:
        self.action_stop_run()

    def action_stop_run(self) -> None:
        if self.controller.following:
            self._stop_followed()
            return
        if self.controller.active:
            self.controller.request_stop()
            self.notify("Stopping every rank…")
        if self.comparing.active:
            self.comparing.request_stop()
            self.notify("Stopping the comparison: every rank…")

    def _stop_followed(self) -> None:
        """A run started elsewhere: app/stop_followed.py asks, then stops it (scancel for a Slurm job's)."""
        if (run := self.controller.followed()) is not None:
            from mgpu_tui.app.stop_followed import stop_followed

            stop_followed(self, run)

    def deliver_screenshot(
        self, filename: str | None = None, path: str | None = None, time_format: str | None = None
    ) -> str | None:
        """The palette's screenshot: into ~/Downloads where there is one, else the current folder
        (Textual's default folder alone failed where no Downloads folder exists)."""
        if path is None:
            downloads = user_downloads_path()
            path = str(downloads if downloads.is_dir() else Path.cwd())
        return super().deliver_screenshot(filename, path, time_format)

    def action_search_logs(self) -> None:
        """/: in the Run view, the cursor in the log search (the logs shown, if the guide was)."""
        if self.query_one(ViewSwitcher).current == "run-view" and (view := self._run_view()):
            view.search_logs()

    def action_toggle_guide(self) -> None:
        """v: in the Run view, the chosen mode's guide and demo source, or the logs; in the Compare
        view, the highlighted mode's demo source, or not."""
        current = self.query_one(ViewSwitcher).current
        if current == "run-view":
            if view := self._run_view():
                view.show_guide()
        elif current == "compare-view":
            if compare := self._compare_view():
                compare.toggle_source()

    def action_toggle_whole(self) -> None:
        if view := self._run_view():
            view.toggle_whole()

    def action_next_gpu(self) -> None:
        if view := self._run_view():
            view.next_gpu()

    def action_leave_field(self) -> None:
        self.set_focus(None)

    async def action_show_tab(self, tab: str) -> None:
        self.query_one(Tabs).active = tab
        await self._show_view(tab)  # now, not a message later

    def action_help(self) -> None:
        from mgpu_tui.app.views.help import HelpScreen

        self.push_screen(HelpScreen())

    def action_quit_app(self) -> None:
        if not self.busy:
            self.exit()
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self._quitting = True
                self.controller.request_stop()
                self.comparing.request_stop()
                self.notify("Stopping every rank, then quitting…")

        from mgpu_tui.app.views.confirm import QUIT_WHILE_RUNNING, Confirm

        self.push_screen(Confirm(QUIT_WHILE_RUNNING), answered)

    def on_unmount(self) -> None:
        self.feed.stop()
        self.controller.close()  # whatever happened, no rank outlives the app
        self.comparing.close()


def create_app(**kwargs) -> MgpuApp:
    return MgpuApp(**kwargs)
