"""A rank's memory read directly from its objects: the bytes of its parameters, buffers, gradients
and optimizer state, each storage counted once (a tied weight, a view, a gradient that is a view of
DDP's bucket), a sharded tensor (FSDP2's and tensor parallelism's DTensor) as its local shard.
Nothing is allocated or run: it reads the tensors' sizes (``untyped_storage().nbytes()``), which the
watch can do at every step, compiled or not, and at the moment of an out-of-memory.

A part takes a storage only if no part before it took it, in the order of PARTS: a buffer that is a
parameter's view is the parameter's; an optimizer's state that is a parameter (none is) would be too.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable
from typing import Any

PARTS = ("parameters", "buffers", "gradients", "optimizer")  # the protocol's MEMORY_PARTS, in order


def _local(tensor: Any) -> Any:
    """A DTensor's local shard (what this rank holds); any other tensor itself."""
    local = getattr(tensor, "_local_tensor", None)
    return local if local is not None else tensor


class Seen:
    """The storages counted so far: each one once, whatever views of it come later."""

    def __init__(self, torch: Any) -> None:
        self._torch = torch
        self._keys: set[tuple[Any, int]] = set()

    def add(self, tensor: Any) -> int:
        """The bytes of ``tensor``'s storage, if not counted yet (0 for one counted, or no tensor)."""
        if not isinstance(tensor, self._torch.Tensor):
            return 0
        local = _local(tensor)
        try:
            storage = local.untyped_storage()
            key = (local.device, storage.data_ptr())
            size = int(storage.nbytes())
        except Exception:  # noqa: BLE001 (a tensor with no storage: a fake, a sparse one, a functional one)
            return 0
        if key[1] == 0:  # an empty storage has no address: each is its own (and holds nothing)
            return size
        if key in self._keys:
            return 0
        self._keys.add(key)
        return size


class Accounting:
    """What the rank holds: the root module (model_root.py's) and every optimizer that stepped."""

    def __init__(self) -> None:
        self._optimizers: weakref.WeakSet[Any] = weakref.WeakSet()

    def optimizer_stepped(self, optimizer: Any) -> None:
        """An optimizer made (Optimizer.__init__) or stepped: what it holds is the rank's."""
        self._optimizers.add(optimizer)

    def optimizers(self) -> list[Any]:
        return list(self._optimizers)

    def read(self, torch: Any, root: Any) -> dict[str, int] | None:
        """The bytes of each of PARTS; None where there is nothing to read (no root, no optimizer)."""
        optimizers = list(self._optimizers)
        if root is None and not optimizers:
            return None
        seen = Seen(torch)
        params = list(root.parameters()) if root is not None else []
        for optimizer in optimizers:
            params += [p for group in optimizer.param_groups for p in group["params"]]
        figures = dict.fromkeys(PARTS, 0)
        figures["parameters"] = _sum(seen, params)
        figures["buffers"] = _sum(seen, root.buffers() if root is not None else ())
        figures["gradients"] = _sum(seen, (getattr(p, "grad", None) for p in params))
        figures["optimizer"] = _sum(
            seen, (value for o in optimizers for state in o.state.values() for value in _values(state))
        )
        return figures


def _values(state: Any) -> Iterable[Any]:
    return state.values() if isinstance(state, dict) else ()


def _sum(seen: Seen, tensors: Iterable[Any]) -> int:
    return sum(seen.add(t) for t in tensors)
