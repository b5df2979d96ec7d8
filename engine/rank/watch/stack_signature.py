"""Where a rank's training thread is, read by the watch's beat thread: a stack's signature (has it
moved?) and the script's own innermost frame, in words. The training thread is the one that ran the
latest backward (script_watch.py): the main thread until then, or again once that thread has ended
(a script that trains in a worker thread while its main thread waits in ``join`` moves where it
trains). Every BEAT_S the thread tells the watch where that thread is and whether it moved (another
call, another line of an outer frame); the watch writes a ``beat`` when it moved and nothing else
was written meanwhile (script_watch.py). A rank that neither steps nor beats has not moved: the
stall watch's evidence (watchdog.py). Frames are read and let go at once: a frame kept alive keeps
its locals alive (docs/architecture.md, the threads).
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from types import FrameType

from mgpu_tui.engine.rank.threads import stop_before_exit

SIGNATURE_FRAMES = 64  # the innermost frames of a stack: its signature
MAX_FRAMES = 512  # looked through for the script's own innermost frame (an import can be deep)

_HERE = os.path.dirname(os.path.abspath(__file__))  # mgpu-tui's own rank code


def main_frame(main: int | None, training: int | None = None) -> FrameType | None:
    """The training thread's innermost frame now (the main thread's, where there is none, or it has
    ended): for the caller to read and drop at once."""
    # Never the frames' dict in a local: it holds this very frame, a cycle only the collector ends.
    if training is not None and (frame := sys._current_frames().get(training)) is not None:
        return frame
    return sys._current_frames().get(main) if main is not None else None


def signature(frame: FrameType | None, program: str) -> tuple[tuple, str | None]:
    """(what the stack is doing, the innermost frame of the script's own code in words).

    The innermost frame counts by its function only: a loop inside one function (polling, a sleep
    in a retry loop that never gets anywhere) is not movement; a call returning, another starting,
    or an outer frame at another line is."""
    frames: list[FrameType] = []
    while frame is not None and len(frames) < MAX_FRAMES:
        frames.append(frame)
        frame = frame.f_back
    moving_parts = tuple(
        (f.f_code.co_filename, f.f_code.co_name, None if i == 0 else f.f_lineno)
        for i, f in enumerate(frames[:SIGNATURE_FRAMES])
    )
    own = next((f for f in frames if f.f_code.co_filename == program), None)
    shown = own or next((f for f in frames if not f.f_code.co_filename.startswith(_HERE)), None)
    where = None
    if shown is not None:
        where = f"{shown.f_code.co_name} at {os.path.basename(shown.f_code.co_filename)}:{shown.f_lineno}"
    return moving_parts, where


BEAT_S = 1.0


def look_at_main_thread(
    stopped: threading.Event,
    program: str,
    tick: Callable[[str | None, bool], None],
    training: Callable[[], int | None] = lambda: None,
) -> None:
    """Until ``stopped``: every BEAT_S, ``tick(where, moved)``, where the training thread (the
    ident ``training()`` gives; else the main thread) is in ``program`` and whether it moved since
    the last look."""
    main = threading.main_thread().ident
    last = None
    while not stopped.wait(BEAT_S):
        # The main thread's frames are read and let go at once, never held until the next beat:
        # a frame kept alive keeps its locals alive, and code that counts on a local's end then
        # sees it end at a random moment, on this thread. torch's DDPOptimizer does: a guard's
        # __del__ turns off its compile state, so torch.compile of a DDP model failed on a GPU
        # ("Cannot access data pointer of Tensor") when a beat had held an earlier frame.
        now, where = signature(main_frame(main, training()), program)
        tick(where, last is not None and now != last)
        last = now


class Beats:
    """The beat thread (``mgpu-beat``) of a rank: started once the process is one, and joined
    before the program's exit handlers run (threads.py): it reads the training thread's frames and
    the process group, which the script's exit handlers may be tearing down."""

    def __init__(
        self,
        program: str,
        tick: Callable[[str | None, bool], None],
        training: Callable[[], int | None] = lambda: None,
    ) -> None:
        self._program, self._tick, self._training = program, tick, training
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._watch_stack, name="mgpu-beat", daemon=True)
        self._thread.start()
        stop_before_exit(self.stop)

    def _watch_stack(self) -> None:
        look_at_main_thread(self._stopped, self._program, self._tick, self._training)

    def stop(self) -> None:
        """No beat after this."""
        self._stopped.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)
