"""Open the app: bare ``mgpu-tui``, ``mgpu-tui run ... --tui`` with a run to start, or ``mgpu-tui open``
with a run folder to show."""

from __future__ import annotations

import gc
import os
import signal
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from mgpu_tui.engine.launch.options import RUN_ROOT
from mgpu_tui.engine.launch.spec import LaunchSpec, resolve
from mgpu_tui.engine.machine import host as host_module
from mgpu_tui.errors import ExitCode
from mgpu_tui.logs import start_app_log

if TYPE_CHECKING:
    from mgpu_tui.engine.metrics.server import MetricsServer


def tui_command(
    spec: LaunchSpec | None,
    *,
    open_run: Path | None = None,
    run_root: Path = RUN_ROOT,
    metrics: MetricsServer | None = None,
) -> int:
    """The app; ``metrics`` (--metrics-port, bound already): the figures of the run it shows, served
    for as long as it is open."""
    try:
        return _tui(spec, open_run, run_root, metrics)
    finally:
        if metrics is not None:
            metrics.close()


def _tui(
    spec: LaunchSpec | None, open_run: Path | None, run_root: Path, metrics: MetricsServer | None
) -> int:
    host = None  # bare `mgpu-tui`: the app probes the machine once its first frame is up
    if spec is not None:
        # Refuse bad input here, with one sentence and exit 2, before any screen opens.
        host = host_module.probe()
        resolve(spec, host)  # SpecError, EnvironmentUnusable: cli.main says it and exits
    # No collections while Textual and the app load and build the first screen: they only
    # allocate, and collecting meanwhile cost 30-70 ms of the first frame here. The app
    # freezes what it built and turns collection back on once that frame is up.
    gc.disable()
    from mgpu_tui.app import create_app

    start_app_log()
    app = create_app(
        start=spec, host=host, open_run=open_run, run_root=spec.run_root if spec is not None else run_root
    )
    app.jobs.runs.metrics = metrics

    def stop_and_exit(signum, frame) -> None:
        # The terminal closed (SIGHUP) or we were told to stop (SIGTERM). This runs on the
        # app's own thread, between two steps of its event loop: ask the app to end, and
        # the `finally` below stops every rank once it has.
        app.exit(return_code=ExitCode.INTERRUPTED)

        def force() -> None:  # the app did not end (the signal came mid start-up, say)
            app.jobs.close()
            os._exit(ExitCode.INTERRUPTED)

        threading.Timer(5.0, force).start()

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, stop_and_exit)
    try:
        app.run()
    finally:
        app.jobs.close()  # no rank outlives the app, however it ended
    if spec is not None:  # `run --tui`: the summary the headless command prints, once the screen is gone
        say_the_end(app.jobs.runs)
    if app.return_code == ExitCode.INTERRUPTED:
        return ExitCode.INTERRUPTED
    if app.return_code:
        return ExitCode.FAILED
    if spec is not None:  # `run --tui`: the command's outcome is the run's, as headless
        return run_exit_code(app.jobs.runs.run)
    return ExitCode.OK


def say_the_end(runs) -> None:
    """The app's last run of its own, ended: its summary on stdout and its root cause on stderr, as
    `mgpu-tui run` prints them (a run the app followed, or one never started, says nothing)."""
    summary = getattr(runs.run, "summary", None) if runs.owned else None
    if summary is None:
        return
    from mgpu_tui.console import plain
    from mgpu_tui.reports.run_summary import summary_text

    try:
        print(summary_text(summary))
        if summary.root_cause:
            print(plain(summary.root_cause.describe()), file=sys.stderr)
    except OSError:  # the terminal is gone (SIGHUP): the run's folder keeps its summary
        pass


def run_exit_code(run) -> ExitCode:
    """The exit code of the app's last run: 0 ok, 1 failed (or never started), 130 stopped."""
    state = getattr(run, "state", None)
    value = getattr(state, "value", None)
    if value == "ok":
        return ExitCode.OK
    if value == "interrupted":
        return ExitCode.INTERRUPTED
    return ExitCode.FAILED
