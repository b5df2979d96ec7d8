"""The FLOPs of a training step, counted by torch's own FLOP counter, for any model.

A step is never counted while it runs: Dynamo will not compile under a dispatch mode such as the
counter, and marks the frame to be skipped for good (a compiled model then ran eager on most
steps). The step is *replayed* instead, at a step boundary, once per input shape:

- on the eager module inside the wrappers (DistributedDataParallel's ``.module``, DataParallel's,
  torch.compile's ``_orig_mod``, a DeepSpeed engine's ``.module``), so no collective is issued and
  nothing is compiled;
- with fake tensors of the shapes, dtypes and devices the root's forward was called with
  (``FakeTensorMode``: no memory, no kernels), under ``torch.compiler.set_stance("force_eager")``
  (a model that compiles its blocks runs them eagerly) and the autocast the forward ran under;
- forward, then ``torch.autograd.grad`` of every output that needs a gradient with respect to the
  parameters (never ``backward()``, which would store fake gradients in the real ``.grad``).
- a block that repeats (a deep model's layers) once per input signature, its FLOPs added for
  each of its calls (flop_twins.py): the count costs what one layer costs, not what all do.

The loss function outside the model is not counted (a cross-entropy is a few elementwise passes).
FSDP's modules hold shards: their step is n/a, with the reason. The formulas torch lacks (the
CPU's fused attention) are registered, the same as torch's own for the GPU kernels.

This module receives the torch module, and reaches torch's parts (fake tensors, the counter) only while it
counts: in a rank, where the script has imported torch.
"""

from __future__ import annotations

import contextlib
import importlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from mgpu_tui.engine.rank.watch.flop_twins import Twins

OFF = "MGPU_FLOPS"  # "0" in the environment: no FLOP is counted, and the summary says why
MAX_FORWARDS = 1024  # a step's forwards held at most (a loop that never steps must not grow them)
MAX_SHAPES = 16  # distinct input shapes counted at most; beyond, the count stops (a reason says why)
LIGHTNING = ("lightning.pytorch", "pytorch_lightning")  # a LightningModule's classes
SHARDED = "FSDP holds shards of the parameters on each rank, so a step's FLOPs are not counted"


_PLAIN = (int, float, bool, str, type(None))  # an argument that is its own key


@dataclass(frozen=True)
class _Meta:
    shape: tuple[int, ...]
    dtype: Any
    device: Any
    requires_grad: bool


@dataclass(frozen=True)
class Call:
    """A forward call's inputs with every tensor reduced to its metadata, and the autocast it ran
    under: enough to replay it with fake tensors."""

    key: tuple  # hashable: equal keys, equal FLOPs
    args: tuple
    kwargs: dict
    autocast: tuple[str, Any] | None  # (device type, dtype) where autocast was on


class NotCounted(Exception):  # noqa: N818 (a reason, told as the figure's n/a)
    """The step cannot be counted; the message says why, as one sentence."""


def describe(torch: Any, args: tuple, kwargs: dict) -> Call:
    """``args`` and ``kwargs`` of a forward, reduced (cheap: run at every training forward)."""
    flat = (torch.Tensor, *_PLAIN)
    if all(isinstance(v, flat) for v in args) and all(isinstance(v, flat) for v in kwargs.values()):
        # model(ids), model(x, y), model(input_ids=..., labels=...): no pytree, whose flatten was
        # most of the cost; the key says which path made it, so the two never meet.
        leaves, spec, key = [*args, *kwargs.values()], None, ["flat", len(args), *kwargs]
    else:
        leaves, spec = torch.utils._pytree.tree_flatten((args, kwargs))
        key = [str(spec)]
    metas: list[Any] = []
    device_type = None
    for leaf in leaves:
        if isinstance(leaf, torch.Tensor):
            meta = _Meta(tuple(leaf.shape), leaf.dtype, leaf.device, bool(leaf.requires_grad))
            device_type = device_type or leaf.device.type
            metas.append(meta)
            key.append((meta.shape, str(meta.dtype), str(meta.device), meta.requires_grad))
        else:
            metas.append(leaf)
            key.append(leaf if isinstance(leaf, _PLAIN) else type(leaf).__name__)
    autocast = None
    if device_type is not None and torch.is_autocast_enabled(device_type):
        autocast = (device_type, torch.get_autocast_dtype(device_type))
    key.append(str(autocast))
    if spec is None:
        rebuilt_args, rebuilt_kwargs = metas[: len(args)], dict(zip(kwargs, metas[len(args) :]))
    else:
        rebuilt_args, rebuilt_kwargs = torch.utils._pytree.tree_unflatten(metas, spec)
    return Call(tuple(key), tuple(rebuilt_args), dict(rebuilt_kwargs), autocast)


def eager_module(torch: Any, root: Any) -> Any:
    """The module inside ``root``'s wrappers, whose forward issues no collective and compiles
    nothing; :class:`NotCounted` for FSDP's, which hold shards."""
    module = root
    for _ in range(8):
        kind = type(module).__name__
        if kind in ("FullyShardedDataParallel",) or type(module).__name__.startswith("FSDP"):
            raise NotCounted(SHARDED)
        if isinstance(module, (torch.nn.parallel.DistributedDataParallel, torch.nn.DataParallel)):
            module = module.module
        elif hasattr(module, "_orig_mod") and kind == "OptimizedModule":
            module = module._orig_mod
        elif kind == "DeepSpeedEngine" and hasattr(module, "module"):  # its forward runs ZeRO's machinery
            module = module.module
        else:
            break
    if any(c.__module__.startswith(LIGHTNING) for c in type(module).__mro__):
        raise NotCounted(
            "Lightning calls training_step through the module's forward, and replaying it would run its "
            "logging: a step's FLOPs are not counted"
        )
    if any(hasattr(p, "ds_id") for p in module.parameters()):
        raise NotCounted(
            "DeepSpeed ZeRO-3 partitions the parameters across ranks, so a step's FLOPs are not counted"
        )
    if any(type(p).__name__ == "DTensor" for p in module.parameters()):
        raise NotCounted(
            "its parameters are DTensors (sharded across ranks), so a step's FLOPs are not counted"
        )
    return module


def count(torch: Any, root: Any, call: Call) -> int:
    """The FLOPs of one forward and backward of ``root`` on ``call``'s inputs (torch's counter on a
    fake replay); :class:`NotCounted` with the reason when it cannot be replayed."""
    module = eager_module(torch, root)
    register_missing_formulas(torch)
    from torch._subclasses.fake_tensor import FakeTensorMode

    fake = FakeTensorMode(allow_non_fake_inputs=True)
    with fake:
        args, kwargs = torch.utils._pytree.tree_map(
            lambda leaf: _fake(torch, leaf) if isinstance(leaf, _Meta) else leaf, (call.args, call.kwargs)
        )
    stance = getattr(getattr(torch, "compiler", None), "set_stance", None)
    try:
        with _hooks_set_aside(torch, module), torch.enable_grad(), _maybe(stance, "force_eager"):
            return _replay(torch, module, fake, args, kwargs, call.autocast)
    except Exception as exc:  # noqa: BLE001 (the user's forward, on fake tensors: any error is a reason)
        first = str(exc).strip().splitlines()[0][:160] if str(exc).strip() else ""
        raise NotCounted(
            f"its forward could not be replayed on fake tensors to count FLOPs ({type(exc).__name__}"
            + (f": {first}" if first else "")
            + ")"
        ) from None


def _replay(torch: Any, module: Any, fake: Any, args: Any, kwargs: Any, autocast: Any) -> int:
    """Forward, then the parameters' gradients of every output that needs one, under the counter;
    each repeated block counted once (Twins)."""
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    memo = (
        Twins(torch, module, counter, lambda a, k: describe(torch, a, k).key)
        if not any(
            isinstance(a, torch.Tensor) and a.requires_grad
            for a in torch.utils._pytree.tree_leaves((args, kwargs))
        )
        else None  # an input that needs a gradient: its blocks' backward is not theirs alone
    )
    with fake, counter, _autocast(torch, autocast), memo.replaced() if memo else contextlib.nullcontext():
        out = module(*args, **kwargs)
        outs = [
            t
            for t in torch.utils._pytree.tree_leaves(out)
            if isinstance(t, torch.Tensor) and t.requires_grad and (t.is_floating_point() or t.is_complex())
        ]
        params = [p for p in module.parameters() if p.requires_grad]
        if outs and params:
            torch.autograd.grad(
                outs, params, grad_outputs=[torch.ones_like(t) for t in outs], allow_unused=True
            )
    return int(counter.get_total_flops()) + (memo.repeated_flops if memo else 0)


_MODULE_HOOKS = (
    "_forward_pre_hooks",
    "_forward_pre_hooks_with_kwargs",
    "_forward_hooks",
    "_forward_hooks_with_kwargs",
    "_forward_hooks_always_called",
    "_backward_pre_hooks",
    "_backward_hooks",
)
_GLOBAL_HOOKS = (
    "_global_forward_pre_hooks",
    "_global_forward_hooks",
    "_global_forward_hooks_with_kwargs",
    "_global_forward_hooks_always_called",
    "_global_backward_pre_hooks",
    "_global_backward_hooks",
)


@contextlib.contextmanager
def _hooks_set_aside(torch: Any, module: Any) -> Iterator[None]:
    """Every module hook (the modules' own and the global ones) out of the way while the replay
    runs, and back as they were after: a hook of the script's that keeps what it sees (an
    activation for logging) must never be handed a fake tensor. The counter's own (global) hooks go
    into the empty tables and leave with it."""
    modules = importlib.import_module("torch.nn.modules.module")

    saved: list[tuple[Any, str, Any]] = []
    try:
        for name in _GLOBAL_HOOKS:
            if hasattr(modules, name):
                saved.append((modules, name, getattr(modules, name)))
                setattr(modules, name, type(getattr(modules, name))())
        for sub in module.modules():
            for name in _MODULE_HOOKS:
                table = sub.__dict__.get(name)
                if table:
                    saved.append((sub, name, table))
                    sub.__dict__[name] = type(table)()
        yield
    finally:
        for owner, name, table in reversed(saved):
            if owner is modules:
                setattr(owner, name, table)
            else:
                owner.__dict__[name] = table


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


def _fake(torch: Any, meta: _Meta) -> Any:
    tensor = torch.empty(meta.shape, dtype=meta.dtype, device=meta.device)
    if meta.requires_grad and (tensor.is_floating_point() or tensor.is_complex()):
        tensor.requires_grad_(True)
    return tensor


class _maybe:  # noqa: N801 (a context manager used as a function)
    """``factory(*args)`` as a context, or nothing where torch has no such factory."""

    def __init__(self, factory: Any, *args: Any) -> None:
        self._context = factory(*args) if factory is not None else None

    def __enter__(self) -> None:
        if self._context is not None:
            self._context.__enter__()

    def __exit__(self, *exc: Any) -> None:
        if self._context is not None:
            self._context.__exit__(*exc)


def _autocast(torch: Any, autocast: tuple[str, Any] | None) -> Any:
    if autocast is None:
        return _maybe(None)
    return torch.autocast(autocast[0], dtype=autocast[1])


_registered = False


def register_missing_formulas(torch: Any) -> None:
    """The CPU's fused attention kernels have no formula in torch's counter (it counts them 0): they
    get the formulas torch gives the GPU's (sdpa_flop, sdpa_backward_flop: the same arithmetic)."""
    global _registered
    if _registered:
        return
    _registered = True
    counter = importlib.import_module("torch.utils.flop_counter")
    aten = torch.ops.aten
    pairs = (
        ("_scaled_dot_product_flash_attention_for_cpu", "sdpa_flop"),
        ("_scaled_dot_product_flash_attention_for_cpu_backward", "sdpa_backward_flop"),
    )
    for op_name, formula in pairs:
        op = getattr(aten, op_name, None)
        function = getattr(counter, formula, None)
        if op is not None and function is not None and op not in counter.flop_registry:
            counter.register_flop_formula(op, get_raw=True)(function)


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
                flops = count(self._torch, self._root, call)
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

    def _say(self, note: str) -> None:
        self.note = note
        self.news = True
