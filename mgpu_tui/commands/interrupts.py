"""SIGTERM and SIGHUP end a headless command the way Ctrl-C does: every rank stopped first, exit 130."""

from __future__ import annotations

import signal


def _raise_interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def interrupt_on_term_and_hup() -> None:
    """From now on SIGTERM and SIGHUP raise KeyboardInterrupt, which the commands already handle."""
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _raise_interrupt)
