"""The app's views under its tabs: each built the first time it shows.

Tabs over this ContentSwitcher of the views themselves: TabbedContent would wrap
each view in two more full-screen containers, each painted on every tab switch.
A view nobody opens must not delay the first frame, so only the Dashboard (or the
Run view, for ``run --tui``) is built up front.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from textual.widget import Widget
from textual.widgets import ContentSwitcher

from mgpu_tui.engine.machine.host import Host

if TYPE_CHECKING:
    from mgpu_tui.engine.machine.host_layout import HostLayout

TABS = {"dashboard": "Dashboard", "topology": "Topology", "run": "Run", "compare": "Compare", "runs": "Runs"}


@dataclass(frozen=True)
class ViewContext:
    """What the views are built with: the machine (probed when a view first needs it), where runs
    are kept, and the host's layout (given by tests; read from this machine when None)."""

    host: Callable[[], Host]
    run_root: Path
    host_layout: HostLayout | None = None


def new_view(tab: str, context: ViewContext) -> Widget:
    """A tab's view. Imported here: each view (and what it uses) loads when first shown."""
    if tab == "dashboard":
        from mgpu_tui.app.views.dashboard import Dashboard

        return Dashboard(host_layout=context.host_layout, id="dashboard-view")
    if tab == "topology":
        from mgpu_tui.app.views.topology import TopologyView

        return TopologyView(host_layout=context.host_layout, id="topology-view")
    if tab == "run":
        from mgpu_tui.app.views.run.view import RunView

        return RunView(context.host(), context.run_root, id="run-view")
    if tab == "runs":
        from mgpu_tui.app.views.runs import RunsView

        return RunsView(context.run_root, id="runs-view")
    from mgpu_tui.app.views.compare import CompareView

    return CompareView(context.host(), context.run_root, id="compare-view")


class View(Widget):
    """A tab's view with keys of its own (its BINDINGS, and an ``action_`` method for each).

    The app forwards them to the view shown wherever the focus is (app.py). Focus may also stay
    on a field of a view that was switched away from: its keys act only while it is shown.
    """

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return self.display


class ViewSwitcher(ContentSwitcher):
    DEFAULT_CSS = """
    ViewSwitcher {
        height: 1fr;
    }
    """

    def __init__(self, context: ViewContext, **kwargs) -> None:
        super().__init__(**kwargs)
        self.context = context

    def view(self, tab: str) -> Widget | None:
        """The tab's view; None before it first showed (or after the app closed)."""
        return next(iter(self.query(f"#{tab}-view")), None)

    def shown(self) -> Widget | None:
        """The view on screen now."""
        return self.view(self.current.removesuffix("-view")) if self.current else None

    async def show(self, tab: str) -> tuple[Widget, bool]:
        """Switch to the tab's view; (the view, whether it was built just now)."""
        view = self.view(tab)
        built = view is None
        if view is None:
            # (Textual's Lazy would mount it anyway right after the first frame, and raise
            # MountError if the app is already quitting.)
            view = new_view(tab, self.context)
            view.display = False  # shown by the switch below, not beside the current view meanwhile
            await self.mount(view)
        self.current = f"{tab}-view"
        return view, built
