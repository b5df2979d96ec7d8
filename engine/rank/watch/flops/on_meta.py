"""The meta replay: the same forward and backward as replay.py's, on meta tensors, several times
cheaper than fake ones (plain meta kernels, where a fake tensor takes each operation through Python).

Meta tensors have no device, and a few functions choose their kernel by the device: which kernel
scaled-dot-product attention runs (a fused one, or the math of two matrix multiplies and a softmax,
which torch's counter counts differently), and the recurrent layers (cuDNN's, oneDNN's). Each call of
attention is therefore *probed*: run once on fake tensors of the real device, its shapes, strides
and the step's autocast, forward and backward under the counter, and handed to the meta replay as a
stand-in of its output's shape (twins.py's), its FLOPs added beside the counter's. A recurrent layer
stops the meta replay (:class:`NotOnMeta`): the fake replay counts it.

Anything else a device decides is caught where it matters: step_flops.py keeps this replay for a
rank only after it gave the same count as the fake replay on the rank's first shape.
"""

from __future__ import annotations

import functools
from typing import Any

from mgpu_tui.engine.rank.watch.flops.inputs import Call, TensorMeta, describe
from mgpu_tui.engine.rank.watch.flops.replay import (
    autocast_of,
    eager_module,
    empty_of,
    forward_and_backward,
    register_missing_formulas,
    replaying,
    tensors_of,
)
from mgpu_tui.engine.rank.watch.flops.twins import gradients, stand_in_function

RECURRENT = ("lstm", "gru", "rnn_tanh", "rnn_relu")  # torch.<name>: the kernel is the device's choice


class NotOnMeta(Exception):  # noqa: N818 (a reason to replay on fake tensors instead)
    """This step cannot be replayed on meta tensors as its device would run it."""


def count_on_meta(torch: Any, root: Any, call: Call) -> int:
    """The FLOPs of one forward and backward of ``root`` on ``call``'s inputs, replayed on meta
    tensors; :class:`NotOnMeta` (or whatever the forward raised) where it cannot be."""
    module = eager_module(torch, root)
    register_missing_formulas(torch)
    device = _device(torch, module, call)
    params = {n: _meta_like(p) for n, p in module.named_parameters()}
    buffers = {n: _meta_like(b) for n, b in module.named_buffers()}
    args, kwargs = tensors_of(torch, call, lambda meta: empty_of(torch, meta, device="meta"))
    probes = _probes_class(torch)(device, call.autocast)

    def forward(*a: Any, **k: Any) -> Any:
        return torch.func.functional_call(module, {**params, **buffers}, a, k, strict=False)

    with replaying(torch, module), probes:
        return forward_and_backward(
            torch, module, forward, (tuple(args), kwargs), params.values(), extra=lambda: probes.flops
        )


def _device(torch: Any, module: Any, call: Call) -> Any:
    """The device the step runs on: its parameters', else its first input tensor's."""
    param = next(module.parameters(), None)
    if param is not None:
        return param.device
    leaves = torch.utils._pytree.tree_leaves((call.args, call.kwargs))
    meta = next((leaf for leaf in leaves if isinstance(leaf, TensorMeta)), None)
    if meta is None:
        raise NotOnMeta("nothing says which device the step runs on")
    return meta.device


def _meta_like(tensor: Any) -> Any:
    """A meta tensor of ``tensor``'s shape, strides and dtype, needing a gradient as it does."""
    return tensor.new_empty_strided(tensor.shape, tensor.stride(), device="meta").requires_grad_(
        tensor.requires_grad
    )


@functools.cache
def _probes_class(torch: Any) -> Any:
    """The mode that probes attention and refuses recurrent layers (made once: this module imports
    no torch)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.overrides import TorchFunctionMode
    from torch.utils._python_dispatch import _disable_current_modes
    from torch.utils.flop_counter import FlopCounterMode

    attention = torch.nn.functional.scaled_dot_product_attention
    refused = {getattr(torch, name): name for name in RECURRENT if hasattr(torch, name)}
    stand_in = stand_in_function(torch)
    leaves = torch.utils._pytree.tree_leaves

    class Probes(TorchFunctionMode):
        """Within the meta replay: each attention call probed on fake tensors of ``device``."""

        def __init__(self, device: Any, autocast: tuple[str, Any] | None) -> None:
            super().__init__()
            self.flops = 0
            self._device, self._autocast = device, autocast
            self._seen: dict[tuple, tuple[int, tuple]] = {}
            self._fake = FakeTensorMode()

        def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: Any = None) -> Any:
            kwargs = kwargs or {}
            if func in refused:
                raise NotOnMeta(f"torch.{refused[func]}'s kernel is its device's choice")
            if func is not attention:
                return func(*args, **kwargs)
            tensors = [t for t in leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
            key = (describe(torch, args, kwargs).key, tuple(t.stride() for t in tensors))
            if key not in self._seen:
                self._seen[key] = self._probe(func, args, kwargs, tensors[0].dtype)
            flops, output = self._seen[key]
            self.flops += flops
            return stand_in.apply(output, len(tensors), *tensors)

        def _probe(self, func: Any, args: tuple, kwargs: dict, dtype: Any) -> tuple[int, tuple]:
            """``func`` run once on fake tensors of the real device, forward and backward under its
            own counter (the replay's is set aside meanwhile): its FLOPs, and its output's (shape,
            dtype in the meta replay, device, stride)."""
            with _disable_current_modes():
                with self._fake:
                    fake_args, fake_kwargs = torch.utils._pytree.tree_map(self._fake_of, (args, kwargs))
                counter = FlopCounterMode(display=False)
                with self._fake, counter, autocast_of(torch, self._autocast):
                    out = func(*fake_args, **fake_kwargs)
                    wanted = [
                        t
                        for t in leaves((fake_args, fake_kwargs))
                        if isinstance(t, torch.Tensor) and t.requires_grad
                    ]
                    gradients(torch, [out], wanted)
                return int(counter.get_total_flops()), (
                    tuple(out.shape),
                    dtype,
                    torch.device("meta"),
                    tuple(out.stride()),
                )

        def _fake_of(self, leaf: Any) -> Any:
            if not isinstance(leaf, torch.Tensor):
                return leaf
            fake = torch.empty_strided(leaf.shape, leaf.stride(), dtype=leaf.dtype, device=self._device)
            return fake.requires_grad_(leaf.requires_grad)

    return Probes
