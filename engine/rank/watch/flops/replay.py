"""The fake replay: a step's forward and backward on fake tensors under torch's FLOP counter, on the
eager module inside the wrappers, with the script's hooks set aside. It is the reference every
count is held to (on_meta.py's faster replay is used only where it agrees with this one)."""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable, Iterator
from typing import Any

from mgpu_tui.engine.rank.watch.flops.inputs import Call, TensorMeta, describe
from mgpu_tui.engine.rank.watch.flops.twins import Twins, gradients

LIGHTNING = ("lightning.pytorch", "pytorch_lightning")  # a LightningModule's classes
SHARDED = "FSDP holds shards of the parameters on each rank, so a step's FLOPs are not counted"


class NotCounted(Exception):  # noqa: N818 (a reason, told as the figure's n/a)
    """The step cannot be counted; the message says why, as one sentence."""


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
        args, kwargs = tensors_of(torch, call, lambda meta: empty_of(torch, meta))
    try:
        with replaying(torch, module), fake, autocast_of(torch, call.autocast):
            return forward_and_backward(torch, module, module, (args, kwargs), module.parameters())
    except Exception as exc:  # noqa: BLE001 (the user's forward, on fake tensors: any error is a reason)
        first = str(exc).strip().splitlines()[0][:160] if str(exc).strip() else ""
        raise NotCounted(
            f"its forward could not be replayed on fake tensors to count FLOPs ({type(exc).__name__}"
            + (f": {first}" if first else "")
            + ")"
        ) from None


def tensors_of(torch: Any, call: Call, make: Callable[[TensorMeta], Any]) -> tuple[tuple, dict]:
    """``call``'s args and kwargs with ``make(meta)`` in place of each tensor's metadata."""
    return torch.utils._pytree.tree_map(
        lambda leaf: make(leaf) if isinstance(leaf, TensorMeta) else leaf, (call.args, call.kwargs)
    )


@contextlib.contextmanager
def replaying(torch: Any, module: Any) -> Iterator[None]:
    """What every replay runs under: the script's hooks set aside, gradients on, and anything the
    script compiled run eagerly (``set_stance("force_eager")``, torch >= 2.6)."""
    stance = getattr(getattr(torch, "compiler", None), "set_stance", None)
    eager = stance("force_eager") if stance is not None else contextlib.nullcontext()
    with _hooks_set_aside(torch, module), torch.enable_grad(), eager:
        yield


def forward_and_backward(
    torch: Any,
    module: Any,
    forward: Callable[..., Any],
    inputs: tuple[tuple, dict],
    parameters: Any,
    extra: Callable[[], int] = lambda: 0,
) -> int:
    """``forward(*args, **kwargs)`` of ``inputs``, then the gradients of every output that needs
    one with respect to ``parameters``, under torch's counter; each repeated block of ``module``
    counted once (Twins). ``extra()``: FLOPs counted beside the counter (on_meta.py's probes)."""
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)

    def counted() -> int:
        return int(counter.get_total_flops()) + extra()

    leaves = torch.utils._pytree.tree_leaves
    memo = (
        Twins(torch, module, counted, lambda a, k: describe(torch, a, k).key)
        if not any(isinstance(a, torch.Tensor) and a.requires_grad for a in leaves(inputs))
        else None  # an input that needs a gradient: its blocks' backward is not theirs alone
    )
    with counter, memo.replaced() if memo else contextlib.nullcontext():
        out = forward(*inputs[0], **inputs[1])
        outs = [
            t
            for t in leaves(out)
            if isinstance(t, torch.Tensor) and (t.is_floating_point() or t.is_complex())
        ]
        gradients(torch, outs, [p for p in parameters if p.requires_grad])
    return counted() + (memo.repeated_flops if memo else 0)


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


def empty_of(torch: Any, meta: TensorMeta, device: Any = None) -> Any:
    """An empty tensor of ``meta``'s shape and dtype, on its device (or ``device``), needing a
    gradient where it did (floating and complex tensors only)."""
    tensor = torch.empty(meta.shape, dtype=meta.dtype, device=meta.device if device is None else device)
    if meta.requires_grad and (tensor.is_floating_point() or tensor.is_complex()):
        tensor.requires_grad_(True)
    return tensor


def autocast_of(torch: Any, autocast: tuple[str, Any] | None) -> Any:
    """The autocast a call ran under, as a context (nothing where it ran without)."""
    if autocast is None:
        return contextlib.nullcontext()
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
