"""The beat thread of a script's rank (engine/rank/watch/script_watch.py) reads the main thread's stack
and lets go of it at once. A frame it held until its next beat kept that frame's locals alive past
their function's end; torch's DDPOptimizer ends its compile state in a guard's __del__, so on a GPU
torch.compile of a DDP model failed under mgpu-tui ("Cannot access data pointer of Tensor") and
not bare (docs/gpu-validation.md)."""

import time
import weakref

from mgpu_tui.engine.rank.watch import stack_signature
from mgpu_tui.engine.rank.watch.script_watch import ScriptWatch


class Beats:
    """What the watcher tells its reporter: the beats it sends."""

    def __init__(self) -> None:
        self.beats: list[str | None] = []

    def beat(self, where: str | None) -> None:
        self.beats.append(where)

    def flush(self) -> None:  # (each beat writes the steps waiting: none here)
        return


class Guard:
    """A local whose end matters, as DDPOptimizer's FakeifyFirstAOTInvocationGuard's does."""


def compile_a_submodule(seconds: float) -> weakref.ref:
    guard = Guard()
    time.sleep(seconds)  # the watcher looks at this frame meanwhile, several times
    return weakref.ref(guard)


def test_a_local_ends_with_its_function_not_at_the_watchers_next_beat(monkeypatch):
    monkeypatch.setattr(stack_signature, "BEAT_S", 0.25)
    watch = ScriptWatch(Beats(), "train.py")  # torch is not hooked: only the beat thread runs
    watch._beats.start()
    try:
        for _ in range(3):
            guard = compile_a_submodule(0.6)
            assert guard() is None  # gone as its function returned
    finally:
        watch._beats.stop()
