"""One rank's count of its steps' FLOPs, from the steps it really runs.

Two windows, each opened and closed only inside the watch's own wrappers:

- **a forward**: the root's training forward (its pre-hook opens, its post-hook, which runs even when
  the forward raises, closes); its inputs' key (inputs.py) is counted once: the FLOPs of what the
  root's forward dispatched;
- **a backward**: the outer ``backward()`` call (closed in its ``finally``); keyed by the keys of the
  root forwards since the previous backward (its micro-batch's), counted once: everything autograd
  ran, the loss's backward too, and apart, what it recomputed (activation checkpointing).

A window opens only for a key not counted yet: once per input shape, and never again for a shape
seen. A step's FLOPs are then the sum over its forwards and backwards, from the counts kept; a step
in which a window opened is *observed* (the counting mode makes it slower: its time is left out of
the step figures, aggregate.py). A backward run inside the root's forward (Lightning's manual
optimization, inside DDP's forward) is part of that forward's count. Every failure becomes the
rank's :attr:`note`, the reason its figure is n/a; nothing raises into the script.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any

from mgpu_tui.engine.rank.threads import stop_before_exit
from mgpu_tui.engine.rank.watch.flops import compiled, counter
from mgpu_tui.engine.rank.watch.flops.inputs import Call, describe

OFF = "MGPU_FLOPS"  # "0" in the environment: no FLOP is counted, and the summary says why
MAX_FORWARDS = 1024  # a step's forwards held at most (a loop that never steps must not grow them)
MAX_SHAPES = 16  # distinct forward keys (and backward groups) counted at most; beyond, the count stops
MAX_RECOMPILED = 3  # windows of one key dropped because Dynamo compiled in them; then the count stops


@dataclass(frozen=True)
class Counted:
    """A step's count: ``flops`` without recomputation (the model's: MFU), ``recomputed`` the FLOPs
    it ran again (checkpointed activations: with ``flops``, HFU's), ``observed`` whether a window
    opened in it (None figures where the step could not be counted)."""

    flops: int | None
    recomputed: int | None
    observed: bool


def precision(torch: Any, root: Any, call: Call) -> str:
    """What the step's matrix multiplies run in: the autocast dtype, else the parameters' dtype;
    float32 is "tf32" on CUDA where torch lets matmuls use TF32."""
    if call.autocast is not None:
        return precision_name(str(call.autocast[1]), call.autocast[0], tf32=False)
    param = next((p for p in root.parameters() if p.is_floating_point()), None)
    if param is None:
        return "fp32"
    return precision_name(str(param.dtype), param.device.type, tf32=_tf32(torch))


def precision_name(dtype: str, device_type: str, *, tf32: bool) -> str:
    """``torch.bfloat16`` -> "bf16", ...; float32 on CUDA with TF32 allowed -> "tf32"."""
    text = dtype.replace("torch.", "")
    name = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "float64": "fp64"}.get(
        text, "fp8" if text.startswith("float8") else text
    )
    return "tf32" if name == "fp32" and device_type == "cuda" and tf32 else name


def _tf32(torch: Any) -> bool:
    """torch.backends.cuda.matmul.allow_tf32, or a float32 matmul precision of "high" or "medium"."""
    try:
        if torch.backends.cuda.matmul.allow_tf32:
            return True
        return torch.get_float32_matmul_precision() in ("high", "medium")
    except Exception:  # noqa: BLE001
        return False


class StepFlops:
    """One rank's count: the root's forwards and the backwards open and close their windows;
    :meth:`total` at each step boundary."""

    def __init__(self, torch: Any) -> None:
        self._torch = torch
        self._sees_compiled = counter.sees_compiled_graphs(torch)
        self._forward: dict[tuple, int] = {}  # a forward's key -> its FLOPs
        self._backward: dict[tuple, tuple[int, int]] = {}  # forward keys -> (its FLOPs, recomputed)
        self._forwards: list[tuple] = []  # this step's forwards' keys
        self._backwards: list[tuple] = []  # this step's backwards' groups
        self._group: list[tuple] = []  # the forwards since the last backward
        self._depth = 0  # root forwards under way (a root called inside its own forward)
        self._open: tuple[str, tuple, Any] | None = None  # (forward or backward, key, mode)
        self._compiled_at_open = 0  # Dynamo's compiles when the window opened
        self._recompiled: dict[tuple, int] = {}  # a key's windows dropped because Dynamo compiled in them
        self._observed = False
        self._steps = 0
        self._stale: list[Any] = []  # modes left open under one the job opened (closed once they can be)
        self._handling: list[Any] = [None, None]  # the exception handled as a forward, a backward began
        off = os.environ.get(OFF) == "0"
        self.note: str | None = f"counting FLOPs is off ({OFF}=0)" if off else None  # why not counted
        self.precision: str | None = None  # of the first counted forward
        self.news = off  # precision or note changed since the rank last said its about

    # ---- the windows (the watch's hooks call these; none raises) --------------------------

    def forward_begins(self, module: Any, args: tuple, kwargs: dict) -> None:
        """A training forward of the root starts (its pre-hook)."""
        self._depth += 1
        if self._depth > 1 or self.note is not None:
            return
        self._handling[0] = sys.exc_info()[1]  # a loop run inside an except block: not this forward's
        if len(self._forwards) >= MAX_FORWARDS:
            self._say(f"more than {MAX_FORWARDS} forwards came between two optimizer steps")
            return
        try:
            call = describe(self._torch, args, kwargs)
        except Exception as exc:  # noqa: BLE001 (inputs of a kind torch's pytree cannot take apart)
            self._say(f"its forward's inputs could not be described ({type(exc).__name__})")
            return
        self._forwards.append(call.key)
        self._group.append(call.key)
        if call.key in self._forward or self._open is not None:
            return
        if self.precision is None:
            self.precision = precision(self._torch, module, call)
            self.news = True
        if self._room(self._forward):
            self._begin("forward", call.key)

    def forward_ends(self) -> None:
        """A forward of the root ended, or raised (its post-hook, called either way: inside the
        exception's handling, where ``sys.exc_info()`` tells). A forward that raised is no part
        of the step (the job that goes on skipped its batch), and its partial count is dropped."""
        if self._depth == 0:
            return  # an evaluation's (its start was never one of these)
        self._depth -= 1
        if self._depth > 0:
            return
        failed = sys.exc_info()[1] not in (None, self._handling[0])
        if self._open is not None and self._open[0] == "forward":
            self._end(failed)
        if failed and self._forwards and self._group:
            self._forwards.pop()
            self._group.pop()

    def backward_begins(self, create_graph: bool) -> None:
        """The outer ``backward()`` call starts."""
        if self._depth > 0:
            return  # inside the root's forward: that forward's count holds it
        group, self._group = tuple(self._group), []
        self._handling[1] = sys.exc_info()[1]
        if self.note is not None:
            return
        self._backwards.append(group)
        if group not in self._backward and self._open is None and self._room(self._backward):
            self._begin("backward", group)
            if self._open is not None:
                self._open[2].in_backward = not create_graph  # a double backward: all of it is the step's

    def backward_ends(self) -> None:
        """The outer ``backward()`` call returned or raised (in its ``finally``: ``sys.exc_info()``
        tells). A backward that raised is no part of the step, nor its micro-batch's forwards, and
        its partial count is dropped."""
        failed = sys.exc_info()[1] not in (None, self._handling[1])
        if self._open is not None and self._open[0] == "backward":
            self._end(failed)
        if failed and self._backwards and self._depth == 0:
            group = self._backwards.pop()  # its micro-batch's forwards with it
            if group and self._forwards[-len(group) :] == list(group):
                del self._forwards[-len(group) :]

    @property
    def observing_forward(self) -> bool:
        """A forward's window is open (memory/saved.py counts its activations in it)."""
        return self._open is not None and self._open[0] == "forward"

    def total(self) -> Counted:
        """The count of the step that ends now (an optimizer step)."""
        forwards, self._forwards = self._forwards, []
        backwards, self._backwards = self._backwards, []
        observed, self._observed = self._observed, False
        self._steps += 1
        self._stale = [mode for mode in self._stale if not counter.close_mode(mode)]
        if self._open is None:
            self._depth = 0  # a forward whose end never came (an exception its hook could not see)
        if self.note is not None:
            return Counted(None, None, observed)
        if not forwards:
            if backwards and self._steps > 1:
                self._say(
                    "no forward of the model it trains was seen between two optimizer steps, so a "
                    "step's FLOPs are not counted"
                )
            return Counted(None, None, observed)
        if any(k not in self._forward for k in forwards) or any(g not in self._backward for g in backwards):
            return Counted(None, None, observed)  # a window still open (a step inside a forward)
        flops = sum(self._forward[k] for k in forwards) + sum(self._backward[g][0] for g in backwards)
        recomputed = sum(self._backward[g][1] for g in backwards)
        return Counted(flops - recomputed, recomputed, observed)

    # ---- inside ----------------------------------------------------------------------------

    def _room(self, counts: dict) -> bool:
        if len(counts) < MAX_SHAPES:
            return True
        self._say(
            f"its forward was called with more than {MAX_SHAPES} input shapes, so counting stopped "
            "(each shape is counted once, as it runs)"
        )
        return False

    def _begin(self, kind: str, key: tuple) -> None:
        try:
            why = compiled.why_unseen(self._torch, self._sees_compiled)
            if why is not None:
                self._say(why)
                return
            mode = counter.open_mode(self._torch)
        except Exception as exc:  # noqa: BLE001 (the count's own failure: never the job's)
            self._say(f"counting its FLOPs failed ({type(exc).__name__}: {str(exc)[:160]})")
            return
        _close_at_exit_and_fork()
        self._open = (kind, key, mode)
        self._compiled_at_open = compiled.compiles()
        compiled.current = mode
        self._observed = True

    def _end(self, failed: bool = False) -> None:
        assert self._open is not None
        kind, key, mode = self._open
        self._open = None
        compiled.current = None
        if not counter.close_mode(mode):
            mode.paused += 1  # counts nothing more; closed when what the job opened inside it is
            self._say("a dispatch mode the job opened while its step was counted stayed open after it")
            self._stale.append(mode)
            return
        if failed:
            return  # counted again when it next runs whole
        if compiled.compiles() != self._compiled_at_open:
            self._recompiled[key] = self._recompiled.get(key, 0) + 1
            if self._recompiled[key] >= MAX_RECOMPILED:
                self._say(
                    f"torch.compile compiled again each of the {MAX_RECOMPILED} times its step was "
                    "counted, and a count would hold the compiler's work"
                )
            return  # counted again when it next runs compiled
        if mode.unseen is not None:
            self._say(mode.unseen)
        elif kind == "forward":
            self._forward[key] = mode.flops
        else:
            self._backward[key] = (mode.flops, mode.recomputed)

    def _say(self, note: str) -> None:
        if self.note is None:
            self.note = note
            self.news = True


_closing = False


def _close_at_exit_and_fork() -> None:
    """Once a process: a window still open when the main thread ends (an interrupt escaped the
    forward, past its hook) or when the process forks (in the child) is closed there, not left open
    under the job's exit handlers or its child's code."""
    global _closing
    if not _closing:
        _closing = True
        os.register_at_fork(after_in_child=_close_open_window)
        stop_before_exit(_close_open_window)


def _close_open_window() -> None:
    mode, compiled.current = compiled.current, None
    if mode is not None:
        counter.close_mode(mode)
