"""Owns the app's comparison: one thread runs the modes and only posts messages.

Like the RunController: only that thread touches the runs; a stop is a request
it carries out; closing the app closes every run whatever its state.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from textual.app import App

from mgpu_tui.app.messages import CompareEnded, CompareStarted, CompareUpdated
from mgpu_tui.engine.launch.spec import LaunchSpec
from mgpu_tui.engine.machine.host import Host

if TYPE_CHECKING:
    from mgpu_tui.engine.compare import comparison as compare
    from mgpu_tui.engine.compare.runner import Runner
    from mgpu_tui.engine.run.lifecycle import Run

log = logging.getLogger(__name__)


class CompareController:
    def __init__(self, app: App, host: Callable[[], Host]) -> None:
        """``host``: what the machine can run, asked for when a comparison starts."""
        self.app = app
        self.host = host
        self.runner: Runner | None = None
        self._thread: threading.Thread | None = None
        self._closed = threading.Event()

    @property
    def active(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self, modes: Sequence[str], template: LaunchSpec) -> compare.Comparison:
        """Check every mode's spec, then run them in a thread; raises SpecError before anything starts."""
        if self.active:
            raise RuntimeError("a comparison is already going")
        from mgpu_tui.engine.compare import comparison as compare  # loaded by the first comparison
        from mgpu_tui.engine.compare.runner import Runner

        comparison = compare.new_comparison(modes, template)
        runner = Runner(
            compare.compare_specs(modes, template), comparison, host=self.host(), on_update=self._post_update
        )
        runner.check()
        self.runner = runner
        self.app.post_message(CompareStarted(comparison))  # before any update of its thread
        self._thread = threading.Thread(target=self._work, args=(runner,), name="mgpu-compare", daemon=True)
        self._thread.start()
        return comparison

    def _post_update(self, comparison: compare.Comparison, running: Sequence[Run]) -> None:
        progress = [(r.resolved.mode.name, r.stats().steps, r.resolved.spec.steps) for r in running]
        self.app.post_message(CompareUpdated(list(comparison.rows), progress))

    def _work(self, runner: Runner) -> None:
        try:
            runner.run()
        except Exception as exc:  # a bug in running the comparison: say so, and leave no rank behind
            log.exception("the comparison failed; stopping its runs")
            self.app.call_from_thread(
                self.app.notify,
                f"The comparison failed ({type(exc).__name__}); "
                "every rank was stopped. The app's log has the details.",
                severity="error",
                timeout=12,
                markup=False,
            )
            runner.close()
        finally:
            if not self._closed.is_set():
                self.app.post_message(CompareEnded(runner.comparison))

    def request_stop(self) -> None:
        if self.runner is not None:
            self.runner.stop()

    def rank_processes(self) -> dict[int, tuple[int, str | None]]:
        runner = self.runner
        running = list(runner.running) if runner is not None else []
        return running[0].rank_processes() if running else {}

    def close(self) -> None:
        """Stop every run and wait for the thread: nothing of it may outlive the app."""
        self._closed.set()
        self.request_stop()
        if self._thread is not None:
            self._thread.join(timeout=20)
        if self.runner is not None:
            self.runner.close()
