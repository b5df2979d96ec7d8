"""Open the app: bare ``mgpu-tui``, or ``mgpu-tui run ... --tui`` with a run to start."""

from __future__ import annotations

import signal
import sys

from mgpu_tui.engine import host as host_module
from mgpu_tui.engine.spec import EnvironmentUnusable, LaunchSpec, SpecError, resolve
from mgpu_tui.exit_codes import ExitCode


def tui_command(spec: LaunchSpec | None) -> int:
    host = host_module.probe()
    if spec is not None:
        # Refuse bad input here, with one sentence and exit 2, before any screen opens.
        try:
            resolve(spec, host)
        except SpecError as exc:
            print(f"mgpu-tui: {exc}", file=sys.stderr)
            return ExitCode.USAGE
        except EnvironmentUnusable as exc:
            print(f"mgpu-tui: {exc}", file=sys.stderr)
            return ExitCode.ENVIRONMENT
    from mgpu_tui.app import create_app

    app = create_app(start=spec, host=host)

    def stop_and_exit(signum, frame) -> None:  # the terminal closed, or we were told to stop
        app.controller.close()
        sys.exit(ExitCode.INTERRUPTED)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, stop_and_exit)
    try:
        app.run()
    finally:
        app.controller.close()  # no rank outlives the app, however it ended
    return ExitCode.OK if not app.return_code else ExitCode.FAILED
