"""Asked before quitting while a run is going: quitting stops every rank."""

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static


class ConfirmQuit(ModalScreen[bool]):
    DEFAULT_CSS = """
    ConfirmQuit {
        align: center middle;
    }
    #confirm {
        width: 84;
        height: auto;
        padding: 1 2;
        border: thick $accent;
        background: $surface;
    }
    """
    BINDINGS = [("y", "answer(True)", "Yes"), ("enter", "answer(True)", "Yes"),
                ("n", "answer(False)", "No"), ("escape", "answer(False)", "No")]  # fmt: skip

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm"):
            yield Static(
                "A run is going. Quit and stop every rank?\n\n[b]y[/b] / Enter: yes    [b]n[/b] / Escape: no"
            )

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)
