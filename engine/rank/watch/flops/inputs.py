"""A training forward's inputs, reduced to what a replay needs (run at every training forward of
the root, so it stays cheap: bench/run.py flops times it): each tensor's shape, dtype, device and
whether it needs a gradient, the plain values as they are, and the autocast it ran under."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

PLAIN = (int, float, bool, str, type(None))  # an argument that is its own key


@dataclass(frozen=True)
class TensorMeta:
    """A tensor's metadata: a replay makes a fake or meta tensor of it."""

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


def describe(torch: Any, args: tuple, kwargs: dict) -> Call:
    """``args`` and ``kwargs`` of a forward, reduced (cheap: run at every training forward)."""
    flat = (torch.Tensor, *PLAIN)
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
            meta = TensorMeta(tuple(leaf.shape), leaf.dtype, leaf.device, bool(leaf.requires_grad))
            device_type = device_type or leaf.device.type
            metas.append(meta)
            key.append((meta.shape, str(meta.dtype), str(meta.device), meta.requires_grad))
        else:
            metas.append(leaf)
            key.append(leaf if isinstance(leaf, PLAIN) else type(leaf).__name__)
    autocast = None
    if device_type not in (None, "meta") and torch.is_autocast_enabled(device_type):  # meta: no autocast
        autocast = (device_type, torch.get_autocast_dtype(device_type))
    key.append(str(autocast))
    if spec is None:
        rebuilt_args, rebuilt_kwargs = metas[: len(args)], dict(zip(kwargs, metas[len(args) :]))
    else:
        rebuilt_args, rebuilt_kwargs = torch.utils._pytree.tree_unflatten(metas, spec)
    return Call(tuple(key), tuple(rebuilt_args), dict(rebuilt_kwargs), autocast)
