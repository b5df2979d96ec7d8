"""A training forward's inputs, reduced to a key (run at every training forward of the root, so it
stays cheap: bench/run.py flops times it): each tensor's shape, dtype, device and whether it needs
a gradient, the plain values as they are, and the autocast it ran under. Equal keys, equal FLOPs:
a forward is counted once per key (step_flops.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

PLAIN = (int, float, bool, str, type(None))  # an argument that is its own key


@dataclass(frozen=True)
class Call:
    """A forward call's inputs as a key, and the autocast it ran under."""

    key: tuple  # hashable: equal keys, equal FLOPs
    autocast: tuple[str, Any] | None  # (device type, dtype) where autocast was on


def describe(torch: Any, args: tuple, kwargs: dict) -> Call:
    """``args`` and ``kwargs`` of a forward, reduced (cheap: run at every training forward)."""
    flat = (torch.Tensor, *PLAIN)
    if all(isinstance(v, flat) for v in args) and all(isinstance(v, flat) for v in kwargs.values()):
        # model(ids), model(x, y), model(input_ids=..., labels=...): no pytree, whose flatten was
        # most of the cost; the key says which path made it, so the two never meet.
        leaves, key = [*args, *kwargs.values()], ["flat", len(args), *kwargs]
    else:
        leaves, spec = torch.utils._pytree.tree_flatten((args, kwargs))
        key = [str(spec)]
    device_type = None
    for leaf in leaves:
        if isinstance(leaf, torch.Tensor):
            device_type = device_type or leaf.device.type
            key.append((tuple(leaf.shape), str(leaf.dtype), str(leaf.device), bool(leaf.requires_grad)))
        else:
            key.append(leaf if isinstance(leaf, PLAIN) else type(leaf).__name__)
    autocast = None
    if device_type not in (None, "meta") and torch.is_autocast_enabled(device_type):  # meta: no autocast
        autocast = (device_type, torch.get_autocast_dtype(device_type))
    key.append(str(autocast))
    return Call(tuple(key), autocast)
