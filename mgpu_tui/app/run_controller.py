"""Owns the app's current run: one thread starts, polls and stops it, and only posts messages.

Only that thread touches the Run, so polling and stopping never race. A stop is a
request the thread carries out; closing the app closes the run whatever its state.

The app may instead *follow* a run it did not start (``mgpu-tui open``, the Runs view): a
finished one is replayed from its files, a live one followed as they grow. Such a run is not
the app's: closing the app leaves it going, and a stop is only a request to the process
that follows it (engine/records/follow.py).
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

from textual.app import App

from mgpu_tui.app.messages import RunEnded, RunUpdated
from mgpu_tui.engine.launch.spec import LaunchSpec

if TYPE_CHECKING:
    from pathlib import Path

    from mgpu_tui.engine.records.follow import FollowedRun
    from mgpu_tui.engine.run.lifecycle import Run

log = logging.getLogger(__name__)

POLL_INTERVAL_S = 0.25


class RunController:
    def __init__(self, app: App) -> None:
        self.app = app
        self.run: Run | FollowedRun | None = None
        self.owned = True  # False for a run the app follows and did not start
        self._thread: threading.Thread | None = None
        self._stop_requested = threading.Event()
        self._wake = threading.Event()  # ends the thread's wait between polls
        self._closed = threading.Event()

    @property
    def active(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def owns_active(self) -> bool:
        """A run of the app's own is going: quitting must stop it."""
        return self.active and self.owned

    @property
    def following(self) -> bool:
        return self.active and not self.owned

    def start(self, spec: LaunchSpec) -> None:
        """Prepare and start a run; raises SpecError, EnvironmentUnusable or RunDirError for bad input."""
        if self.owns_active:
            raise RuntimeError("a run is already going")
        from mgpu_tui.engine.run.lifecycle import Run  # loaded by the first run, not with the app

        self.unfollow()
        run = Run.prepare(spec)
        run.start()
        self._begin(run, owned=True)

    def follow(self, path: Path) -> FollowedRun:
        """Show a run from its folder (RecordError, with a sentence, for one that cannot be)."""
        if self.owns_active:
            raise RuntimeError("a run is already going")
        from mgpu_tui.engine.records.follow import FollowedRun

        self.unfollow()
        run = FollowedRun(path)
        self._begin(run, owned=False)
        return run

    def unfollow(self) -> None:
        """Stop following a run the app did not start; the run itself goes on."""
        if self.following:
            self._closed.set()
            self._wake.set()
            self._thread.join(timeout=5)
        self._closed.clear()

    def _begin(self, run, *, owned: bool) -> None:
        self.run, self.owned = run, owned
        self._stop_requested.clear()
        self._wake.clear()
        self._thread = threading.Thread(target=self._loop, args=(run,), name="mgpu-run", daemon=True)
        self._thread.start()

    def request_stop(self) -> None:
        self._stop_requested.set()
        self._wake.set()

    def rank_processes(self) -> dict[int, tuple[int, str | None]]:
        run = self.run
        return run.rank_processes() if run is not None else {}

    def drain_log_lines(self) -> tuple[list[tuple[int, str, str]], int]:
        run = self.run
        return run.drain_log_lines() if run is not None else ([], 0)

    def close(self) -> None:
        """Stop the app's own run (if any) and wait for the thread: nothing of it may outlive the app.
        A followed run is only let go of."""
        self._closed.set()
        if self.owned:
            self._stop_requested.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=15)
        if self.run is not None:
            self.run.close()

    def _post_update(self, run: Run | FollowedRun, owned: bool) -> None:
        # A followed run's telemetry is read from its file and shown whole: a copy each time,
        # since a newer message replaces a waiting one (a few lists; the poll thread owns the original).
        telemetry = None if owned else run.telemetry.copy()
        self.app.post_message(
            RunUpdated(
                run.stats(),
                run.series(),
                run.stall_timeout(),
                telemetry,
                whole=run.whole_series(),
                nodes=run.nodes(),
                stalled=run.stalled_ranks(),
            )
        )

    def _loop(self, run: Run | FollowedRun) -> None:
        owned = self.owned
        try:
            while not run.poll().finished:
                if self._closed.is_set() and not owned:
                    return  # the app lets go of a run it did not start
                if self._stop_requested.is_set() and owned:
                    run.stop()
                    break
                self._post_update(run, owned)
                # Booked after this poll finished, so polls never pile up.
                self._wake.wait(POLL_INTERVAL_S)
                self._wake.clear()
        except Exception as exc:  # a bug in following the run: say so, and leave no rank behind
            log.exception("following the run in %s failed", run.run_dir.path)
            what = "every rank was stopped" if owned else "the run itself was not touched"
            self.app.call_from_thread(
                self.app.notify,
                f"Following the run failed ({type(exc).__name__}); {what}. The app's log has the details.",
                severity="error",
                timeout=12,
                markup=False,
            )
            if not owned:
                return
            run.close()
        self._post_update(run, owned)
        if not self._closed.is_set() and (run.summary is not None or not owned):
            self.app.post_message(RunEnded(run.summary))  # None: a followed run that was cut off
