"""One rank's count of its steps' FLOPs: each training forward of the root described, each new input
shape replayed once at a step boundary (the first on fake tensors and on meta tensors both, the
meta replay kept for the later shapes where the two agree), the step's precision, and every failure
told as a reason, never raised into the script."""

from __future__ import annotations

import os
from typing import Any

from mgpu_tui.engine.rank.watch.flops.inputs import Call, describe
from mgpu_tui.engine.rank.watch.flops.on_meta import count_on_meta
from mgpu_tui.engine.rank.watch.flops.replay import NotCounted, count

OFF = "MGPU_FLOPS"  # "0" in the environment: no FLOP is counted, and the summary says why
MAX_FORWARDS = 1024  # a step's forwards held at most (a loop that never steps must not grow them)
MAX_SHAPES = 16  # distinct input shapes counted at most; beyond, the count stops (a reason says why)


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
    """One rank's count: :meth:`seen` at each training forward of the root, :meth:`total` at each
    step boundary (where new shapes are counted). Every failure becomes :attr:`note`, never an
    exception into the script."""

    def __init__(self, torch: Any) -> None:
        self._torch = torch
        self._calls: list[Call] = []
        self._root: Any = None
        self._counted: dict[tuple, int] = {}
        off = os.environ.get(OFF) == "0"
        self.note: str | None = f"counting FLOPs is off ({OFF}=0)" if off else None  # why not counted
        self.precision: str | None = None  # of the first counted call
        self.news = off  # precision or note changed since the rank last said its about
        self.counted_now = False  # the latest total() replayed a new shape (its time is not the step's)
        # New shapes replayed on meta tensors (on_meta.py): None until the rank's first shape says
        # whether that replay counts what the fake one does for this model.
        self.on_meta: bool | None = None

    def seen(self, module: Any, args: tuple, kwargs: dict) -> None:
        """A training forward of the root, its inputs reduced; never raises (the forward it precedes
        counts the step's batch too, and must not lose it to this)."""
        if self.note is None:
            if len(self._calls) >= MAX_FORWARDS:
                self._calls.clear()
                self._say(f"more than {MAX_FORWARDS} forwards came between two optimizer steps")
                return
            try:
                self._calls.append(describe(self._torch, args, kwargs))
            except Exception as exc:  # noqa: BLE001 (inputs of a kind torch's pytree cannot take apart)
                self._say(f"its forward's inputs could not be described ({type(exc).__name__})")
                return
            self._root = module

    def total(self, aside: Any) -> int | None:
        """The FLOPs of the step that ends now (the sum over its forwards), counting each new shape
        with ``aside()`` open (the step clock leaves that time out); None where any is unknown."""
        calls, self._calls = self._calls, []
        self.counted_now = False
        if not calls or self.note is not None:
            return None
        total = 0
        for call in calls:
            if call.key not in self._counted:
                if len(self._counted) >= MAX_SHAPES:
                    self._say(
                        f"its forward was called with more than {MAX_SHAPES} input shapes, "
                        "so counting stopped (each shape is replayed once)"
                    )
                    return None
                flops = self._count(call, aside)
                if flops is None:
                    return None
                self._counted[call.key] = flops
            total += self._counted[call.key]
        return total

    def _count(self, call: Call, aside: Any) -> int | None:
        self.counted_now = True
        try:
            with aside():
                flops = self._replay(call)
                if self.precision is None:
                    self.precision = precision(self._torch, self._root, call)
                    self.news = True
        except NotCounted as exc:
            self._say(str(exc))
            return None
        except Exception as exc:  # noqa: BLE001 (mgpu-tui's own part fails: the figure is n/a, said why)
            self._say(f"counting its FLOPs failed ({type(exc).__name__}: {str(exc)[:160]})")
            return None
        return flops

    def _replay(self, call: Call) -> int:
        """The meta replay where it gave the fake replay's count on this rank's first shape; the
        fake replay otherwise, and wherever the meta one fails."""
        if self.on_meta:
            try:
                return count_on_meta(self._torch, self._root, call)
            except Exception:  # noqa: BLE001 (what the meta replay cannot do, the fake one may)
                pass
        flops = count(self._torch, self._root, call)
        if self.on_meta is None:
            try:
                self.on_meta = count_on_meta(self._torch, self._root, call) == flops
            except Exception:  # noqa: BLE001 (a recurrent layer, a device written into the forward)
                self.on_meta = False
        return flops

    def _say(self, note: str) -> None:
        self.note = note
        self.news = True
