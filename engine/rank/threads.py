"""The watch's own threads in a rank: each is stopped when the program's main thread ends, before
its exit handlers run (a framework's may destroy the process group a thread is still inside)."""

from __future__ import annotations

import threading
from collections.abc import Callable


def stop_before_exit(stop: Callable[[], None]) -> None:
    """Call ``stop`` when the program's main thread has ended, before its own exit handlers run
    (threading's, which run before ``atexit``'s and before the interpreter finalizes). A thread of
    the watch must be out of torch by then: a framework's exit handler may destroy the process
    group under it, and a daemon thread still inside torch when the interpreter finalizes aborts
    the process ("terminate called without an active exception", exit -6, seen under DeepSpeed's
    launcher). Nothing when the interpreter is already shutting down."""
    register = getattr(threading, "_register_atexit", None)  # the hook concurrent.futures uses
    if register is None:
        return
    try:
        register(stop)
    except RuntimeError:  # "can't register atexit after shutdown"
        pass
