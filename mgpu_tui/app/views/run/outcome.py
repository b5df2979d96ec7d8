"""Under the Run view's charts: the run's note while it goes (ranks sharing GPUs, a straggler: a
remark, never an alarm), then how it ended: its root cause, or its result (what it came to, and
where its files are). Every text a rank wrote is shown as plain text."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from mgpu_tui.app.views.run.text import result_panel
from mgpu_tui.console import plain
from mgpu_tui.engine.protocol.causes import RootCause, users_frames
from mgpu_tui.engine.run.summary import RunSummary
from mgpu_tui.reports.run_summary import node_prefix


class RunOutcome(Static):
    def __init__(self, **kwargs) -> None:
        super().__init__("", **kwargs)
        self._noted: str | None = None  # the remark shown while the run goes

    def begin(self, note: str | None) -> None:
        """A new run: its note (what its figures will not show), until a failure needs the room."""
        self._noted = None
        self.update(Text(f"Note: {note}", style="yellow") if note else "")
        self.set_class(bool(note), "note")
        self.set_class(False, "result")
        self.display = bool(note)

    def remark(self, text: str, *, failed: bool) -> None:
        """A remark while the run goes (a straggler, a verdict); none over a failure or a result."""
        if self.has_class("result") or failed or text == self._noted:
            return  # (a Static's update lays the screen out again: only on a change)
        self._noted = text
        self.update(Text(plain(text), style="yellow"))
        self.set_class(True, "note")
        self.display = True

    def failure(self, summary: RunSummary, cause: RootCause) -> None:
        """The root cause, its meaning, and the user's own frames of its traceback first."""
        hint = (
            [("What it means: ", "bold yellow"), (plain(f"{cause.hint}\n"), "yellow")] if cause.hint else []
        )
        self.update(
            Text.assemble(
                (plain(f"Root cause: {node_prefix(summary, cause.rank)}{cause.headline()}\n"), "bold red"),
                *hint,
                plain(users_frames(cause.traceback[-6000:])[-3000:]),  # the user's frames first
            )
        )
        self.remove_class("note")
        self.display = True

    def result(self, summary: RunSummary) -> None:
        """What the run came to, kept on screen with where its files are."""
        self.update(result_panel(summary))
        self.set_class(False, "note")
        self.set_class(True, "result")
        self.display = True
