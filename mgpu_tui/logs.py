"""The app's log file: whatever the engine and the app logged, for a user to read after the fact.

``$XDG_STATE_HOME/mgpu-tui/app.log`` (by default ``~/.local/state/mgpu-tui/app.log``),
at most three files of 1 MiB. Each run also keeps its own log in its run directory
(engine/run/runlog.py). The headless commands print to the terminal and keep run logs only.
"""

from __future__ import annotations

import logging
import logging.handlers
import os
from pathlib import Path

from mgpu_tui.engine.protocol.text import PlainFormatter

MAX_BYTES = 1 << 20
BACKUPS = 2


def app_log_path() -> Path:
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "mgpu-tui" / "app.log"


def start_app_log() -> Path | None:
    """Send every ``mgpu_tui`` logger's records to the app's log file; its path, or None when it
    cannot be written (the app runs all the same)."""
    path = app_log_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handler = logging.handlers.RotatingFileHandler(
            path, maxBytes=MAX_BYTES, backupCount=BACKUPS, encoding="utf-8"
        )
    except OSError:
        return None
    handler.setFormatter(PlainFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger("mgpu_tui")
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    return path
