"""A yes-or-no question before something that cannot be undone: quitting while a run of the app
goes (it stops every rank), stopping a run the app did not start."""

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static

QUIT_WHILE_RUNNING = "A run is going. Quit and stop every rank?"


class Confirm(ModalScreen[bool]):
    DEFAULT_CSS = """
    Confirm {
        align: center middle;
    }
    #confirm {
        width: 100%;
        max-width: 84;  /* at 80 columns its right edge was cut */
        height: auto;
        padding: 1 2;
        border: thick $accent;
        background: $surface;
    }
    """
    BINDINGS = [
        ("y", "answer(True)", "Yes"),
        ("enter", "answer(True)", "Yes"),
        ("n", "answer(False)", "No"),
        ("escape", "answer(False)", "No"),
    ]

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm"):
            # The question may hold a path: plain text, never markup.
            yield Static(
                Text.assemble(
                    self.question, "\n\n", ("y", "bold"), " / Enter: yes    ", ("n", "bold"), " / Escape: no"
                )
            )

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)
