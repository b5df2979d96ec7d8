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


class Seen:
    """The storages counted so far: each one once, whatever views of it come later. A storage is
    known by its address (CUDA's unified addressing keeps devices' apart)."""

    def __init__(self, torch: Any) -> None:
        self._plain = (torch.Tensor, torch.nn.Parameter)  # a tensor of these types is its own shard
        self._tensor = torch.Tensor
        self._addresses: set[int] = set()

    def add(self, tensor: Any) -> int:
        """The bytes of ``tensor``'s storage, if not counted yet (0 for one counted, or no tensor)."""
        if type(tensor) not in self._plain:
            if not isinstance(tensor, self._tensor):
                return 0
            tensor = getattr(tensor, "_local_tensor", tensor)  # a DTensor: its local shard
        try:
            storage = tensor.untyped_storage()
            address = storage.data_ptr()
            size = storage.nbytes()
        except Exception:  # noqa: BLE001 (a tensor with no storage: a fake, a sparse one, a functional one)
            return 0
        if address == 0:  # an empty storage has no address: each is its own (and holds nothing)
            return size
        if address in self._addresses:
            return 0
        self._addresses.add(address)
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
        held = {id(p): p for p in root.parameters()} if root is not None else {}
        for optimizer in optimizers:
            held.update((id(p), p) for group in optimizer.param_groups for p in group["params"])
        params = list(held.values())
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
