"""A panel of fixed height whose text changes often: it repaints itself without a new layout.

Static.update re-lays out the whole screen on every change; the dashboard's panels
change every second but never change size, so they only need a repaint. A string is
shown as it is, never read as markup: what it says may come from a rank or a path.
"""

from __future__ import annotations

from rich.console import RenderableType
from rich.text import Text
from textual.widget import Widget

from mgpu_tui.console import plain


class TextPanel(Widget):
    def __init__(self, text: RenderableType = "", **kwargs) -> None:
        super().__init__(**kwargs)
        self._text = Text(plain(text)) if isinstance(text, str) else text

    def render(self) -> RenderableType:
        return self._text

    def update(self, text: RenderableType, relayout: bool = False) -> None:
        """``relayout``: the text's height changed (a panel sized to its content must grow)."""
        self._text = Text(plain(text)) if isinstance(text, str) else text
        self.refresh(layout=relayout)
