"""Repeated blocks counted once: a deep model's layers replayed once per input signature within a
step's replay (replay.py, on_meta.py), their FLOPs added for each call. The count stays torch's counter on
a real step, exactly (tests/unit/test_flop_count.py), and its cost no longer grows with depth."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any


class Twins:
    """The repeated blocks of a model (a GPT's layers: the children of a ModuleList or Sequential
    with a sibling of the same type and the same parameters), replayed once per input signature.

    A block's first call runs its forward and, at once, its backward (the gradients of its output
    with respect to its inputs and parameters that need one: what the whole step's backward asks of
    it), both under the counter; each later call of the same signature adds those FLOPs again. Every
    call hands the step a stand-in of the output's shape, whose backward passes a gradient to the
    block's inputs and counts nothing (the block's own was counted). A replay of GPT-2 small
    dispatched 5,000 operations on fake tensors, a tenth of them its first block's. Only blocks
    whose output is one tensor are replayed so (a tuple's unused outputs would count a backward the
    step never runs); ``replaced()`` puts them back as they were after."""

    def __init__(
        self, torch: Any, module: Any, counted: Callable[[], int], key_of: Callable[[tuple, dict], tuple]
    ) -> None:
        """``counted()``: the FLOPs the replay has counted so far; ``key_of(args, kwargs)``: a call's
        inputs as a key (inputs.describe's)."""
        self._torch = torch
        self._key_of = key_of
        self._replay_counted = counted
        # signature -> the FLOPs of its first call, both ways, and its output's (shape, dtype, device, stride)
        self._seen: dict[tuple, tuple[int, tuple]] = {}
        self._stand_in = stand_in_function(torch)
        self.repeated_flops = 0
        groups: dict[tuple, list[Any]] = {}
        for parent in module.modules():
            if isinstance(parent, (torch.nn.ModuleList, torch.nn.Sequential)):
                for child in parent.children():
                    groups.setdefault((id(parent), _signature(child)), []).append(child)
        self._blocks = [
            (child, key[1]) for key, children in groups.items() if len(children) > 1 for child in children
        ]

    def _counted(self) -> int:
        """The FLOPs so far: the replay's, and the repeated blocks' added to it."""
        return self._replay_counted() + self.repeated_flops

    @contextlib.contextmanager
    def replaced(self) -> Iterator[None]:
        saved = [(block, block.__dict__.get("forward", _NONE)) for block, _ in self._blocks]
        try:
            for block, signature in self._blocks:
                block.forward = self._once(block, block.forward, signature)
            yield
        finally:
            for block, forward in saved:
                if forward is _NONE:
                    block.__dict__.pop("forward", None)
                else:
                    block.forward = forward

    def _once(self, block: Any, forward: Any, signature: tuple) -> Any:
        torch = self._torch

        def once(*args: Any, **kwargs: Any) -> Any:
            key = (signature, self._key_of(args, kwargs), torch.is_grad_enabled())
            if key in self._seen:
                flops, output = self._seen[key]
                self.repeated_flops += flops
                return self._stand_in_for(block, args, kwargs, output)
            before = self._counted()
            out = forward(*args, **kwargs)
            if not isinstance(out, torch.Tensor):
                return out  # not replayed so: counted with the step's own backward, each call
            inputs = [
                t
                for t in torch.utils._pytree.tree_leaves((args, kwargs))
                if isinstance(t, torch.Tensor) and t.requires_grad
            ]
            gradients(torch, [out], inputs + [p for p in block.parameters() if p.requires_grad])
            output = (tuple(out.shape), out.dtype, out.device, tuple(out.stride()))
            self._seen[key] = (self._counted() - before, output)  # its own repeated blocks included
            return self._stand_in_for(block, args, kwargs, output)

        return once

    def _stand_in_for(self, block: Any, args: tuple, kwargs: dict, output: tuple) -> Any:
        """A tensor of the block's output shape, needing a gradient where the block's output would
        (its inputs' and parameters'), whose backward passes a gradient of the right shape to the
        block's inputs (the layers before it still run their own backward) and counts nothing."""
        torch = self._torch
        inputs = [t for t in torch.utils._pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        params = [p for p in block.parameters() if p.requires_grad]
        return self._stand_in.apply(output, len(inputs), *inputs, *params)


_NONE = object()


def gradients(torch: Any, outs: list[Any], wanted: list[Any]) -> None:
    """The gradients of ``outs`` (each seeded with ones) with respect to ``wanted``, computed under
    whatever counts them and dropped: what a backward asks of them, never stored in ``.grad``."""
    outs = [t for t in outs if t.requires_grad]
    if outs and wanted:
        torch.autograd.grad(outs, wanted, grad_outputs=[torch.ones_like(t) for t in outs], allow_unused=True)


def _signature(block: Any) -> tuple:
    """What makes two blocks the same for counting: their type and their parameters' and buffers'
    names, shapes, dtypes and whether each needs a gradient."""
    return (
        type(block),
        tuple((n, tuple(p.shape), p.dtype, p.requires_grad) for n, p in block.named_parameters()),
        tuple((n, tuple(b.shape), b.dtype) for n, b in block.named_buffers()),
    )


def stand_in_function(torch: Any) -> Any:
    """The autograd function of a stand-in (made once a replay: this module imports no torch).
    ``apply(output, n_inputs, *inputs, *params)``: a tensor of ``output``'s (shape, dtype, device,
    stride), whose backward gives the first ``n_inputs`` tensors a gradient of their shape where
    they need one, and the parameters none (their block's was counted)."""

    class StandIn(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, output: tuple, n_inputs: int, *tensors: Any) -> Any:
            ctx.inputs = [(t.shape, t.dtype, t.device) for t in tensors[:n_inputs]]
            ctx.params = len(tensors) - n_inputs
            shape, dtype, device, stride = output
            return torch.empty_strided(shape, stride, dtype=dtype, device=device)

        @staticmethod
        def backward(ctx: Any, grad: Any) -> Any:
            to_inputs = tuple(
                torch.empty(s, dtype=d, device=v) if needed else None
                for (s, d, v), needed in zip(ctx.inputs, ctx.needs_input_grad[2:])
            )
            return (None, None, *to_inputs, *(None,) * ctx.params)

    return StandIn
