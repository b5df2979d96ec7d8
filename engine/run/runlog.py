"""Each run's own log file, ``mgpu-tui.log`` in its run directory: what the engine did and saw.

The engine logs through ``logging`` (logger ``mgpu_tui.engine.run``); every record of one
run carries its id, and a handler per run writes that run's records, and only them, to
its directory, so several runs in one process (compare --parallel) never mix. The app
adds its own file for everything (mgpu_tui.logs).
"""

from __future__ import annotations

import logging
from pathlib import Path

from mgpu_tui.engine.protocol.text import PlainFormatter

LOGGER = logging.getLogger("mgpu_tui.engine.run")
FORMAT = "%(asctime)s %(levelname)s %(message)s"


class _OnlyRun(logging.Filter):
    def __init__(self, run_id: str) -> None:
        super().__init__()
        self.run_id = run_id

    def filter(self, record: logging.LogRecord) -> bool:
        return getattr(record, "run_id", None) == self.run_id


class RunLog(logging.LoggerAdapter):
    """A logger for one run; :meth:`close` stops writing its file."""

    def __init__(self, run_id: str, path: Path) -> None:
        super().__init__(LOGGER, {"run_id": run_id})
        if LOGGER.level == logging.NOTSET:
            LOGGER.setLevel(logging.INFO)  # the file gets INFO whatever the root logger is set to
        self._handler: logging.Handler | None = None
        try:
            self._handler = logging.FileHandler(path, encoding="utf-8")
        except OSError:  # a run directory that cannot take a log still runs; the app's log has it
            return
        self._handler.setFormatter(PlainFormatter(FORMAT))
        self._handler.addFilter(_OnlyRun(run_id))
        LOGGER.addHandler(self._handler)

    def close(self) -> None:
        if self._handler is not None:
            LOGGER.removeHandler(self._handler)
            self._handler.close()
            self._handler = None
