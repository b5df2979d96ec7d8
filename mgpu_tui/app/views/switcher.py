"""The app's views under its tabs: each built the first time it shows.

Tabs over this ContentSwitcher of the views themselves: TabbedContent would wrap
each view in two more full-screen containers, each painted on every tab switch.
A view nobody opens must not delay the first frame, so only the Dashboard (or the
Run view, for ``run --tui``) is built up front.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from textual.widget import Widget
from textual.widgets import ContentSwitcher

from mgpu_tui.engine.machine.host import Host

if TYPE_CHECKING:
    from mgpu_tui.app.views.compare import CompareView
    from mgpu_tui.app.views.run import RunView
    from mgpu_tui.app.views.topology import TopologyView

TABS = {"dashboard": "Dashboard", "topology": "Topology", "run": "Run", "compare": "Compare", "runs": "Runs"}


def new_view(tab: str, host: Callable[[], Host], run_root: Path) -> Widget:
    """A tab's view. Imported here: each view (and what it uses) loads when first shown."""
    if tab == "dashboard":
        from mgpu_tui.app.views.dashboard import Dashboard

        return Dashboard(id="dashboard-view")
    if tab == "topology":
        from mgpu_tui.app.views.topology import TopologyView

        return TopologyView(id="topology-view")
    if tab == "run":
        from mgpu_tui.app.views.run import RunView

        return RunView(host(), run_root, id="run-view")
    if tab == "runs":
        from mgpu_tui.app.views.runs import RunsView

        return RunsView(run_root, id="runs-view")
    from mgpu_tui.app.views.compare import CompareView

    return CompareView(host(), run_root, id="compare-view")


class ViewSwitcher(ContentSwitcher):
    DEFAULT_CSS = """
    ViewSwitcher {
        height: 1fr;
    }
    """

    def __init__(self, host: Callable[[], Host], run_root: Path, **kwargs) -> None:
        super().__init__(**kwargs)
        self._host = host
        self._run_root = run_root

    def view(self, tab: str) -> Widget | None:
        """The tab's view; None before it first showed (or after the app closed)."""
        return next(iter(self.query(f"#{tab}-view")), None)

    # Each view as its own class, once it exists: its module is imported by then, so asking costs
    # nothing, and a view never shown is never loaded for the asking.

    def run_view(self) -> RunView | None:
        if (view := self.view("run")) is None:
            return None
        from mgpu_tui.app.views.run import RunView

        return view if isinstance(view, RunView) else None

    def compare_view(self) -> CompareView | None:
        if (view := self.view("compare")) is None:
            return None
        from mgpu_tui.app.views.compare import CompareView

        return view if isinstance(view, CompareView) else None

    def topology_view(self) -> TopologyView | None:
        if (view := self.view("topology")) is None:
            return None
        from mgpu_tui.app.views.topology import TopologyView

        return view if isinstance(view, TopologyView) else None

    async def show(self, tab: str) -> tuple[Widget, bool]:
        """Switch to the tab's view; (the view, whether it was built just now)."""
        view = self.view(tab)
        built = view is None
        if view is None:
            # (Textual's Lazy would mount it anyway right after the first frame, and raise
            # MountError if the app is already quitting.)
            view = new_view(tab, self._host, self._run_root)
            view.display = False  # shown by the switch below, not beside the current view meanwhile
            await self.mount(view)
        self.current = f"{tab}-view"
        return view, built
