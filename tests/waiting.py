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


def cpu_seconds(call: Callable[[], T]) -> tuple[T, float]:
    """``call()``'s result and the CPU time this process spent on it: a bound of work that other
    processes on the machine do not move (a wall-clock bound does, and fails a suite on a busy
    machine)."""
    before = time.process_time()
    result = call()
    return result, time.process_time() - before


def never_blocks(call: Callable[[], T], patience: float = 30.0) -> T:
    """``call()``'s result, from a thread given ``patience`` seconds: a call that blocks (a read of
    a FIFO nobody writes) never returns, which this tells apart from a slow one by a margin no
    busy machine closes (the call takes milliseconds)."""
    import threading

    done: list[T] = []
    thread = threading.Thread(target=lambda: done.append(call()), daemon=True)
    thread.start()
    thread.join(patience)
    assert done, f"{call} still blocked after {patience:.0f} s"
    return done[0]


async def settled(pilot) -> None:
    """The app's settled state, whatever the machine's load: its workers done, the messages they
    and the test posted handled, what waited for a refresh drawn. A fixed pause (0.3 s) was too
    short beside other testers' load, and a snapshot then drew a half-done screen."""
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()
    await pilot.wait_for_scheduled_animations()
    await pilot.pause()
