"""The app's work: one run or one comparison at a time, and the rules between them.

The run (run_controller.py) and the comparison (compare_controller.py) each have a thread
that owns them. This is what the app asks of both: start, open, compare, stop, quit. It
refuses what would clash (a second run while one goes), says a user's error in one
notification, and lets no rank outlive the app.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from textual.app import App

from mgpu_tui.app.compare_controller import CompareController
from mgpu_tui.app.run_controller import RunController
from mgpu_tui.console import plain
from mgpu_tui.engine.launch.spec import LaunchSpec
from mgpu_tui.engine.machine.host import Host
from mgpu_tui.errors import exit_code_for

QUIT_CHECK_S = 0.2  # how often a quit that waits for the work to stop looks again


def users_error(exc: Exception) -> bool:
    """An error the user's input caused (the CLI's exit codes 2 and 3, or a record that cannot be
    read): the app says its sentence. Anything else is a bug, and is raised."""
    from mgpu_tui.engine.records.history import RecordError

    return isinstance(exc, RecordError) or exit_code_for(exc) is not None


class Jobs:
    def __init__(self, app: App, host: Callable[[], Host]) -> None:
        self.app = app
        self.runs = RunController(app)
        self.comparing = CompareController(app, host)
        self.quitting = False  # the user chose to quit once the work has stopped

    @property
    def busy(self) -> bool:
        """A run or comparison of the app's own is going (a run it only follows does not count)."""
        return self.runs.owns_active or self.comparing.active

    def rank_processes(self) -> dict[int, tuple[int, str | None]]:
        """The ranks the Dashboard shows: the run's, or the comparison's current run's."""
        return self.runs.rank_processes() or self.comparing.rank_processes()

    def _refused(self, title: str, why: str) -> bool:
        self.app.notify(why, title=title, severity="error")
        return False

    def _attempt(self, title: str, action: Callable[[], object]) -> bool:
        """Do ``action``; a user's error is said in a notification (False), a bug is raised."""
        try:
            action()
        except Exception as exc:
            if not users_error(exc):
                raise
            self.app.notify(plain(str(exc)), title=title, severity="error", timeout=8, markup=False)
            return False
        return True

    def start(self, spec: LaunchSpec) -> bool:
        """Start a run of the app's own; whether it started."""
        if self.comparing.active:
            return self._refused("Cannot start", "A comparison is going; stop it first (s).")
        return self._attempt("Cannot start", lambda: self.runs.start(spec))

    def may_open(self) -> bool:
        """Whether a run can be opened now (it cannot while the app's own work goes: it says so)."""
        return not self.busy or self._refused("Cannot open", "A run of this app is going; stop it first (s).")

    def open(self, path: Path) -> bool:
        """Show a run from its folder: a finished one replayed, a live one followed (never owned)."""
        return self._attempt("Cannot open", lambda: self.runs.follow(path))

    def compare(self, modes: Sequence[str], template: LaunchSpec) -> bool:
        if self.busy:
            return self._refused("Cannot compare", "A run is going; stop it first (s).")
        return self._attempt("Cannot compare", lambda: self.comparing.start(modes, template))

    def stop(self) -> None:
        """s: the app's own run or comparison, every rank; a followed run after asking."""
        if self.runs.following:
            from mgpu_tui.app.stop_followed import stop_followed  # asks first; scancel for Slurm's

            if (run := self.runs.followed()) is not None:
                stop_followed(self.app, run)
            return
        if self.runs.active:
            self.runs.request_stop()
            self.app.notify("Stopping every rank…")
        if self.comparing.active:
            self.comparing.request_stop()
            self.app.notify("Stopping the comparison: every rank…")

    def quit(self) -> None:
        """q: quit now when nothing of the app's own goes; else ask, stop it all, then quit."""
        if not self.busy:
            self.app.exit()
            return

        def answered(yes: bool | None) -> None:
            if not yes:
                return
            self.quitting = True
            self.runs.request_stop()
            self.comparing.request_stop()
            # The work may have ended while the question was up (its end found nobody quitting):
            # looked at again now, and until it has, never waited on by its end alone.
            if not self._quit_if_idle():
                self.app.notify("Stopping every rank, then quitting…")
                self.app.set_interval(QUIT_CHECK_S, self._quit_if_idle)

        from mgpu_tui.app.views.confirm import QUIT_WHILE_RUNNING, Confirm

        self.app.push_screen(Confirm(QUIT_WHILE_RUNNING), answered)

    def _quit_if_idle(self) -> bool:
        """Quit now if nothing of the app's own goes any more; whether it did."""
        if self.busy:
            return False
        self.app.exit()
        return True

    def ended(self, *, run: bool) -> None:
        """The run (``run``) or the comparison ended: the app quits now if it was waiting for that.
        (The thread that posted the end may still be finishing: only the other one must be idle.)"""
        if self.quitting and not (self.comparing.active if run else self.runs.active):
            self.app.exit()

    def close(self) -> None:
        """The app closes: whatever happened, no rank outlives it."""
        self.runs.close()
        self.comparing.close()
