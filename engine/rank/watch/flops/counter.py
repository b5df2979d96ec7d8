"""The dispatch mode that counts what a step runs, as it runs: each aten operation the step
dispatches passes through it unchanged (the same kernel, the same arguments, the same output), and
those torch's FLOP counter has a formula for (``torch.utils.flop_counter.flop_registry``: matrix
multiplies, convolutions, attention) add their FLOPs.

Not torch's ``FlopCounterMode`` itself: it also starts a module tracker, whose global module hooks
make torch.compile warn into the job's stderr. This mode mirrors its dispatch (the same registry,
the same decompositions, so the same count) and adds what the watch needs:

- ``ignore_compile_internals()`` is true (torch 2.9 and later): under any other mode Dynamo skips a
  compiled frame, and the skip sticks for the rest of the job (it then runs eager, silently). Such
  a compiled graph keeps running compiled, and the mode sees only what it dispatches at run time:
  compiled.py counts inductor's graphs from what they declare, and says which backends cannot be
  seen at all;
- a tensor subclass (a DTensor, FSDP2's parameters) handles its operation itself, and the local
  operations it runs come back here: a rank counts what it computes, not the global tensor's work;
- a higher-order operator the registry has no formula for runs as it would, and the count says it
  could not see inside it (:attr:`unseen`);
- inside a backward, the operations run while gradients are on are activation recomputation
  (``torch.utils.checkpoint`` recomputes the forward under ``enable_grad``): counted apart, in
  :attr:`recomputed`.

A failure of the count's own never reaches the job: it becomes :attr:`unseen`, the reason.
"""

from __future__ import annotations

import functools
import importlib
from typing import Any

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


def sees_compiled_graphs(torch: Any) -> bool:
    """Whether a dispatch mode can stay open while a compiled graph runs without Dynamo skipping
    that frame for good (``ignore_compile_internals``, torch 2.9 and later)."""
    base = importlib.import_module("torch.utils._python_dispatch").TorchDispatchMode
    return hasattr(base, "ignore_compile_internals")


def _queries(torch: Any) -> set:
    """Queries of a tensor's layout, which FlopCounterMode leaves to a subclass (a nested tensor)."""
    ops = torch.ops
    return {
        getattr(getattr(ops.aten, name), overload)
        for name, overload in (
            ("sym_is_contiguous", "default"),
            ("is_contiguous", "default"),
            ("is_contiguous", "memory_format"),
            ("is_strides_like_format", "default"),
            ("is_non_overlapping_and_dense", "default"),
            ("size", "default"),
            ("sym_size", "default"),
            ("stride", "default"),
            ("sym_stride", "default"),
            ("storage_offset", "default"),
            ("sym_storage_offset", "default"),
            ("numel", "default"),
            ("sym_numel", "default"),
            ("dim", "default"),
        )
        if hasattr(ops.aten, name) and hasattr(getattr(ops.aten, name), overload)
    } | {ops.prim.layout.default}


@functools.cache
def mode_class(torch: Any) -> Any:
    """The counting mode's class, made once (this module imports no torch of its own)."""
    register_missing_formulas(torch)
    dispatch = importlib.import_module("torch.utils._python_dispatch")
    registry = importlib.import_module("torch.utils.flop_counter").flop_registry
    higher_order = importlib.import_module("torch._ops").HigherOrderOperator
    leaves = torch.utils._pytree.tree_leaves
    subclass = dispatch.is_traceable_wrapper_subclass
    queries = _queries(torch)
    device_query = torch.ops.prim.device.default

    class Counting(dispatch.TorchDispatchMode):  # type: ignore[name-defined]
        """FLOPs of what is dispatched while it is open; :meth:`close` it where it was opened."""

        supports_higher_order_operators = True

        @classmethod
        def ignore_compile_internals(cls) -> bool:
            return True

        def __init__(self) -> None:
            super().__init__()
            self.flops = 0
            self.recomputed = 0  # of flops: run again inside a backward (activation checkpointing)
            self.in_backward = False  # set while a backward runs under it
            self.paused = 0  # inside a compiled graph that declared its FLOPs (compiled.py)
            self.unseen: str | None = None  # why the count misses something: then it is no figure

        def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: Any = None) -> Any:
            kwargs = kwargs or {}
            if func in queries:
                return NotImplemented
            if isinstance(func, higher_order):
                return self._higher_order(func, args, kwargs)
            if any(subclass(leaf) for leaf in leaves((args, kwargs))):
                return NotImplemented  # the subclass runs it; its local operations come back here
            packet = func._overloadpacket
            if packet not in registry and func is not device_query:
                with self:
                    decomposed = func.decompose(*args, **kwargs)
                if decomposed is not NotImplemented:
                    return decomposed
            out = func(*args, **kwargs)
            if packet in registry and not self.paused:
                self._add(registry[packet], args, kwargs, out)
            return out

        def _higher_order(self, func: Any, args: tuple, kwargs: dict) -> Any:
            """A higher-order operator runs as it would without the mode (its inside unseen here):
            counted by its formula where the registry has one, else the count says so."""
            out = func(*args, **kwargs)
            if self.paused:
                return out
            if func in registry:
                self._add(registry[func], args, kwargs, out)
            elif self.unseen is None:
                self.unseen = f"a higher-order operator ({func.name()}) ran, whose inside is not seen"
            return out

        def _add(self, formula: Any, args: tuple, kwargs: dict, out: Any) -> None:
            try:
                flops = int(formula(*args, **kwargs, out_val=out))
            except Exception as exc:  # noqa: BLE001 (the count's own failure: never the job's)
                if self.unseen is None:
                    self.unseen = f"torch's FLOP formula failed ({type(exc).__name__}: {str(exc)[:120]})"
                return
            self.flops += flops
            if self.in_backward and torch.is_grad_enabled():
                self.recomputed += flops

        def declare(self, flops: int) -> None:
            """FLOPs a compiled graph declared for the run it is starting (compiled.py)."""
            self.flops += flops

        def is_top(self) -> bool:
            """Whether this mode is the innermost open one (only then can it be closed alone)."""
            return dispatch._get_current_dispatch_mode() is self

    return Counting


def open_mode(torch: Any) -> Any:
    """A new counting mode, entered."""
    mode = mode_class(torch)()
    mode.__enter__()
    return mode


def close_mode(mode: Any) -> bool:
    """Leave ``mode`` if it is the innermost one (whatever the job opened inside it is closed by
    now, or was left open by an exception that escaped it); whether it was closed."""
    if not mode.is_top():
        return False
    mode.__exit__(None, None, None)
    return True
