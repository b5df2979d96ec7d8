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
import queue
import threading
from typing import TYPE_CHECKING

from textual.app import App

from mgpu_tui.app.messages import RunEnded, RunOpened, RunStarted, RunUpdated
from mgpu_tui.engine.launch.spec import LaunchSpec

if TYPE_CHECKING:
    from pathlib import Path

    from mgpu_tui.engine.metrics.server import MetricsServer
    from mgpu_tui.engine.records.follow import FollowedRun
    from mgpu_tui.engine.run.watched import WatchedRun

log = logging.getLogger(__name__)

POLL_INTERVAL_S = 0.25


UNFOLLOW_JOIN_S = 5.0  # how long letting go of a followed run waits for its thread
CLOSE_JOIN_S = 15.0  # how long closing the app waits for the run's thread to stop its run


class _Watch:
    """One run and the thread that owns it, with events of their own: a thread that outlives the
    wait for it still sees its own `closed` set (nothing clears it), and posts nothing once another
    watch has replaced it."""

    def __init__(self, run: WatchedRun, owned: bool) -> None:
        self.run, self.owned = run, owned
        self.stop_requested = threading.Event()
        self.rank_stops: queue.SimpleQueue[int] = queue.SimpleQueue()  # ranks to stop, one each (x)
        self.closed = threading.Event()
        self.wake = threading.Event()  # ends the thread's wait between polls
        self.thread: threading.Thread | None = None

    def end(self, *, stop: bool) -> None:
        self.closed.set()
        if stop:
            self.stop_requested.set()
        self.wake.set()


class RunController:
    def __init__(self, app: App) -> None:
        self.app = app
        self._watch: _Watch | None = None
        self.metrics: MetricsServer | None = None  # --metrics-port: the current run's figures, served

    @property
    def run(self) -> WatchedRun | None:
        return self._watch.run if self._watch is not None else None

    @property
    def owned(self) -> bool:
        """Whether the current run is the app's own (True when there is none)."""
        return self._watch is None or self._watch.owned

    @property
    def active(self) -> bool:
        watch = self._watch
        return watch is not None and watch.thread is not None and watch.thread.is_alive()

    @property
    def owns_active(self) -> bool:
        """A run of the app's own is going: quitting must stop it."""
        return self.active and self.owned

    @property
    def following(self) -> bool:
        return self.active and not self.owned

    def followed(self) -> FollowedRun | None:
        """The run the app follows and did not start, while it follows one."""
        if not self.following or self._watch is None:
            return None
        from mgpu_tui.engine.records.follow import FollowedRun  # loaded already: it follows one

        run = self._watch.run
        return run if isinstance(run, FollowedRun) else None

    def start(self, spec: LaunchSpec) -> None:
        """Prepare and start a run; raises SpecError, EnvironmentUnusable or RunDirError for bad input."""
        if self.owns_active:
            raise RuntimeError("a run is already going")
        from mgpu_tui.engine.run.lifecycle import Run  # loaded by the first run, not with the app
        from mgpu_tui.engine.run.summary_facts import run_note

        self.unfollow()
        run = Run.prepare(spec)
        run.start()
        # Posted before the run's thread starts: the views hear of the start before any update.
        self.app.post_message(RunStarted(spec, run.resolved, str(run.run_dir.path), run_note(run.resolved)))
        self._begin(run, owned=True)

    def follow(self, path: Path) -> FollowedRun:
        """Show a run from its folder (RecordError, with a sentence, for one that cannot be)."""
        if self.owns_active:
            raise RuntimeError("a run is already going")
        from mgpu_tui.engine.records.follow import FollowedRun

        self.unfollow()
        run = FollowedRun(path)
        self.app.post_message(RunOpened(run))
        self._begin(run, owned=False)
        return run

    def unfollow(self) -> None:
        """Stop following a run the app did not start; the run itself goes on. Its thread, should it
        not end in time, is let go of: it is no longer the current one, so it posts nothing more."""
        watch = self._watch
        if watch is not None and not watch.owned:
            watch.end(stop=False)
            if watch.thread is not None:
                watch.thread.join(timeout=UNFOLLOW_JOIN_S)
                if watch.thread.is_alive():
                    log.warning(
                        "following %s: its thread did not end within %.0f s; let go of",
                        watch.run.run_dir.path,
                        UNFOLLOW_JOIN_S,
                    )

    def _begin(self, run: WatchedRun, *, owned: bool) -> None:
        watch = _Watch(run, owned)
        watch.thread = threading.Thread(target=self._loop, args=(watch,), name="mgpu-run", daemon=True)
        self._watch = watch
        watch.thread.start()

    def request_rank_stop(self, rank: int) -> None:
        """Ask the run's thread to stop one rank of the app's own run (it says what it did)."""
        if self._watch is not None and self._watch.owned:
            self._watch.rank_stops.put(rank)
            self._watch.wake.set()

    def request_stop(self) -> None:
        if self._watch is not None:
            self._watch.stop_requested.set()
            self._watch.wake.set()

    def rank_processes(self) -> dict[int, tuple[int, str | None]]:
        run = self.run
        return run.rank_processes() if run is not None else {}

    def close(self) -> None:
        """Stop the app's own run (if any) and wait for its thread, which closes the run itself: a
        run is only ever touched by the thread that owns it. Should that thread not end in time, it
        still stops and closes its run, and the keeper ends every rank when the app's process goes
        (its parent-death signal). A followed run is only let go of."""
        watch = self._watch
        if watch is None:
            return
        watch.end(stop=watch.owned)
        if watch.thread is not None:
            watch.thread.join(timeout=CLOSE_JOIN_S)
            if watch.thread.is_alive():
                log.warning(
                    "the run's thread did not end within %.0f s; it stops its run itself", CLOSE_JOIN_S
                )

    def _current(self, watch: _Watch) -> bool:
        return self._watch is watch

    def _post_update(self, watch: _Watch, *, final: bool = False) -> None:
        if not self._current(watch):
            return  # replaced by another run's watch: its view is not this run's any more
        run, owned = watch.run, watch.owned
        stats = run.stats()
        if self.metrics is not None:  # (on the run's own thread, which alone touches it)
            self.metrics.publish(run, force=final, stats=stats)  # type: ignore[arg-type]
        # A followed run's telemetry is read from its file and shown whole: a copy each time,
        # since a newer message replaces a waiting one (a few lists; the poll thread owns the original).
        recorded = getattr(run, "telemetry", None)  # a FollowedRun's, read from its file
        telemetry = recorded.copy() if recorded is not None and not owned else None
        self.app.post_message(
            RunUpdated(
                run.drain_log_lines,
                stats,
                run.series(),
                run.stall_timeout(),
                telemetry,
                whole=run.whole_series(),
                nodes=run.nodes(),
                stalled=run.stalled_ranks(),
                machines=run.node_machines(),
                stall=run.stall,
                stopped_rank=run.stopped_rank,
            )
        )

    def _loop(self, watch: _Watch) -> None:
        run, owned = watch.run, watch.owned
        try:
            self._follow(watch)
        finally:
            try:
                run.close()  # here, by the thread that owns the run, whatever became of it
            except Exception:  # noqa: BLE001 (logged; the keeper still ends every rank)
                log.exception("closing the run in %s failed", run.run_dir.path)
        if not owned and watch.closed.is_set():
            return  # let go of: nothing more to say about it
        self._post_update(watch, final=True)
        if not watch.closed.is_set() and self._current(watch) and (run.summary is not None or not owned):
            # summary None: a followed run that was cut off
            self.app.post_message(RunEnded(run.summary, run.stats(), run.drain_log_lines))

    def _follow(self, watch: _Watch) -> None:
        run, owned = watch.run, watch.owned
        try:
            while not run.poll().finished:
                if watch.closed.is_set() and not owned:
                    return  # the app lets go of a run it did not start
                if watch.stop_requested.is_set() and owned:
                    run.stop()
                    break
                while owned and not watch.rank_stops.empty():
                    said = run.stop_rank(watch.rank_stops.get())  # by the thread that owns the run
                    self.app.call_from_thread(self.app.notify, said, markup=False)
                self._post_update(watch)
                # Booked after this poll finished, so polls never pile up.
                watch.wake.wait(POLL_INTERVAL_S)
                watch.wake.clear()
        except Exception as exc:  # a bug in following the run: say so, and leave no rank behind
            log.exception("following the run in %s failed", run.run_dir.path)
            what = "every rank was stopped" if owned else "the run itself was not touched"
            if self._current(watch):
                self.app.call_from_thread(
                    self.app.notify,
                    f"Following the run failed ({type(exc).__name__}); {what}. "
                    "The app's log has the details.",
                    severity="error",
                    timeout=12,
                    markup=False,
                )
