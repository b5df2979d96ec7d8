"""The tests' one way to wait: for a condition, with a deadline, never a fixed sleep standing in for
"the other thread has got there". A fixed sleep in a test is a measurement window (CPU use over
0.3 s), never synchronisation."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(condition: Callable[[], T], timeout: float = 10.0, every: float = 0.02) -> T | None:
    """``condition()``'s first true value within ``timeout`` seconds (looked at every ``every``), or
    None: what it found (a path, a line), or True, for a caller to assert or use."""
    deadline = time.monotonic() + timeout
    while True:
        found = condition()
        if found:
            return found
        if time.monotonic() >= deadline:
            return None
        time.sleep(every)


async def wait_for(pilot, condition: Callable[[], object], timeout: float = 60.0, every: float = 0.2) -> bool:
    """wait_until in a Pilot test: the app runs (pilot.pause) while the condition is looked at."""
    deadline = time.monotonic() + timeout
    while True:
        if condition():
            return True
        if time.monotonic() >= deadline:
            return False
        await pilot.pause(every)
