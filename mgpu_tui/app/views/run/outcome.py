"""Under the Run view's charts: the run's note while it goes (ranks sharing GPUs, a straggler: a
remark, never an alarm; a hang: its verdict, the moment the stall watch finds it), then how it
ended: its root cause, or its result (what it came to, the hang it was stopped in, and where its
files are). Every text a rank wrote is shown as plain text."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from mgpu_tui.app.views.run.text import hang_note, result_panel, slow_ranks_remark, still_hung
from mgpu_tui.console import plain
from mgpu_tui.engine.protocol.causes import RootCause, users_frames
from mgpu_tui.engine.run.causes.watchdog import Stall
from mgpu_tui.engine.run.figures.aggregate import RunStats
from mgpu_tui.engine.run.summary import RunSummary
from mgpu_tui.reports.run_summary import node_prefix

TRACEBACK_SHOWN = 3000  # characters of a root cause's traceback (the user's frames), its end kept


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

    def during(self, stats: RunStats, stall: Stall | None, *, failed: bool) -> None:
        """While the run goes: a hang's verdict once the stall watch found one and while its ranks
        stay where it found them (the remark of a slow rank before it is old news), else the slow
        ranks' remark."""
        if stall is not None and still_hung(stall, {r.rank: r.last_step for r in stats.ranks}):
            self.remark(hang_note(stall), failed=failed, style="bold yellow")
        elif stats.stragglers or stats.verdicts:
            self.remark(slow_ranks_remark(stats), failed=failed)

    def remark(self, text: str, *, failed: bool, style: str = "yellow") -> None:
        """A remark while the run goes (a straggler, a verdict); none over a failure or a result."""
        if self.has_class("result") or failed or text == self._noted:
            return  # (a Static's update lays the screen out again: only on a change)
        self._noted = text
        self.update(Text(plain(text), style=style))
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
                plain(shown_traceback(cause.traceback)),
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


def shown_traceback(traceback: str) -> str:
    """The user's frames of a traceback (causes.py's rule, over the whole of it: a cut made first
    could start inside one of the watch's frames), its last TRACEBACK_SHOWN characters from a
    line's start."""
    frames = users_frames(traceback)
    if len(frames) <= TRACEBACK_SHOWN:
        return frames
    end = frames[-TRACEBACK_SHOWN:]
    return end.split("\n", 1)[1] if "\n" in end else end
