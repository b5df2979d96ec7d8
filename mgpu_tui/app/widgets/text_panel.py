"""A panel of fixed height whose text changes often: it repaints itself without a new layout.

Static.update re-lays out the whole screen on every change; the dashboard's panels
change every second but never change size, so they only need a repaint.
"""

from __future__ import annotations

from rich.console import RenderableType
from textual.widget import Widget


class TextPanel(Widget):
    def __init__(self, text: RenderableType = "", **kwargs) -> None:
        super().__init__(**kwargs)
        self._text = text

    def render(self) -> RenderableType:
        return self._text

    def update(self, text: RenderableType, relayout: bool = False) -> None:
        """``relayout``: the text's height changed (a panel sized to its content must grow)."""
        self._text = text
        self.refresh(layout=relayout)
