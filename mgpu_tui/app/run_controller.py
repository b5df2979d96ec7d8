"""Owns the app's current run: one thread starts, polls and stops it, and only posts messages.

Only that thread touches the Run, so polling and stopping never race. A stop is a
request the thread carries out; closing the app closes the run whatever its state.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

from textual.app import App

from mgpu_tui.app.messages import RunEnded, RunUpdated
from mgpu_tui.engine.launch.spec import LaunchSpec

if TYPE_CHECKING:
    from mgpu_tui.engine.run.lifecycle import Run

log = logging.getLogger(__name__)

POLL_INTERVAL_S = 0.25


class RunController:
    def __init__(self, app: App) -> None:
        self.app = app
        self.run: Run | None = None
        self._thread: threading.Thread | None = None
        self._stop_requested = threading.Event()
        self._closed = threading.Event()

    @property
    def active(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self, spec: LaunchSpec) -> None:
        """Prepare and start a run; raises SpecError, EnvironmentUnusable or RunDirError for bad input."""
        if self.active:
            raise RuntimeError("a run is already going")
        from mgpu_tui.engine.run.lifecycle import Run  # loaded by the first run, not with the app

        run = Run.prepare(spec)
        run.start()
        self.run = run
        self._stop_requested.clear()
        self._thread = threading.Thread(target=self._loop, args=(run,), name="mgpu-run", daemon=True)
        self._thread.start()

    def request_stop(self) -> None:
        self._stop_requested.set()

    def rank_processes(self) -> dict[int, tuple[int, str | None]]:
        run = self.run
        return run.rank_processes() if run is not None else {}

    def drain_log_lines(self) -> tuple[list[tuple[int, str, str]], int]:
        run = self.run
        return run.drain_log_lines() if run is not None else ([], 0)

    def close(self) -> None:
        """Stop the run (if any) and wait for the thread: nothing of it may outlive the app."""
        self._closed.set()
        self._stop_requested.set()
        if self._thread is not None:
            self._thread.join(timeout=15)
        if self.run is not None:
            self.run.close()

    def _loop(self, run: Run) -> None:
        try:
            while not run.poll().finished:
                if self._stop_requested.is_set():
                    run.stop()
                    break
                self.app.post_message(RunUpdated(run.stats(), run.series(), run.stall_timeout()))
                # Booked after this poll finished, so polls never pile up.
                self._stop_requested.wait(POLL_INTERVAL_S)
        except Exception as exc:  # a bug in following the run: say so, and leave no rank behind
            log.exception("following the run in %s failed; stopping it", run.run_dir.path)
            self.app.call_from_thread(self.app.notify, f"Following the run failed ({type(exc).__name__}); "
                                      "every rank was stopped. The app's log has the details.",
                                      severity="error", timeout=12, markup=False)  # fmt: skip
            run.close()
        self.app.post_message(RunUpdated(run.stats(), run.series(), run.stall_timeout()))
        if not self._closed.is_set() and run.summary is not None:
            self.app.post_message(RunEnded(run.summary))
