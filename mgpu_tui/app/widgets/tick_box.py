"""Check boxes whose ticked and unticked states differ in shape, not only in colour.

Textual draws both states as the same "X" in two colours, which many terminals (and every
colour-blind user) cannot tell apart: here a ticked box shows ✓ and an unticked one is empty.
"""

from __future__ import annotations

from rich.segment import Segment
from textual.binding import Binding
from textual.message import Message
from textual.strip import Strip
from textual.widgets import Checkbox, SelectionList
from textual.widgets._toggle_button import ToggleButton
from textual.widgets.option_list import OptionDoesNotExist

TICKED, UNTICKED = "✓", " "


class TickBox(Checkbox):
    @property  # Textual's class attribute, read each time the box is drawn
    def BUTTON_INNER(self) -> str:  # type: ignore[override]  # noqa: N802 (Textual's name)
        return TICKED if self.value else UNTICKED


class TickList(SelectionList):
    """A list to tick in a form: space ticks the highlighted entry, Enter submits the form (it
    ticked the entry too, so that Enter in the Compare view's modes started nothing)."""

    BINDINGS = [Binding("enter", "submit", "Submit", show=False)]

    class Submitted(Message):
        """Enter on the list."""

    def action_submit(self) -> None:
        self.post_message(self.Submitted())

    def render_line(self, y: int) -> Strip:
        strip = super().render_line(y)
        segments = list(strip)
        # Textual's row: the box's left side, its inner mark, its right side, a space, the prompt.
        if len(segments) < 3 or segments[1].text != ToggleButton.BUTTON_INNER:
            return strip
        try:
            option = self.get_option_at_index(self.scroll_offset.y + y)
        except OptionDoesNotExist:
            return strip
        mark = TICKED if option.value in self.selected else UNTICKED
        segments[1] = Segment(mark, segments[1].style, segments[1].control)
        return Strip(segments, strip.cell_length)
