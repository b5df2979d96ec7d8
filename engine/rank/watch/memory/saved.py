"""The activations of an observed step: the bytes of the tensors its model's forward saves for
backward, counted by ``torch.autograd.graph``'s saved-tensor hooks, observing only (the pack hook
returns the tensor itself, the unpack hook what it was given: autograd keeps and uses exactly what
it would bare). They are pushed in the root's forward pre-hook when the FLOP count opens its window
(an observed step: flops/step_flops.py) and popped in its post-hook (which runs when the forward
raises too), only if they are still on top: a job's own hooks (checkpointing's, save_on_cpu's) are
never popped. Each storage counted once; the model's parameters and buffers left out (Linear
saves its weight: it is the parameters', not an activation). The loss function's saved tensors,
outside the model's forward, are not counted."""

from __future__ import annotations

import sys
from typing import Any

from mgpu_tui.engine.rank.watch.memory.accounting import Seen


def _unpack(tensor: Any) -> Any:
    return tensor


class SavedTensors:
    def __init__(self) -> None:
        self._torch: Any = None
        self._seen: Seen | None = None
        self._counted = 0
        self._open = False
        self.taken: int | None = None  # the last observed forward's bytes, until the step takes it

    def open(self, torch: Any, root: Any) -> None:
        """The root's forward begins under the FLOP count's window."""
        if self._open:
            return
        seen = Seen(torch)
        for tensor in (*root.parameters(), *root.buffers()):
            seen.add(tensor)  # their storages: never an activation
        self._torch, self._seen, self._counted = torch, seen, 0
        torch._C._autograd._push_saved_tensors_default_hooks(self._pack, _unpack)
        self._open = True

    def _pack(self, tensor: Any) -> Any:
        # Not while Dynamo traces a compiled forward: a storage's address there would break its graph
        # (the compiled graph's saved tensors are not counted: its activations are n/a, not a guess).
        if self._seen is not None and not self._torch.compiler.is_compiling():
            self._counted += self._seen.add(tensor)
        return tensor

    def close(self) -> None:
        """The root's forward ended (or raised: nothing counted then)."""
        if not self._open:
            return
        top = self._torch._C._autograd._top_saved_tensors_default_hooks(False)
        if top is None or top[0] != self._pack:
            self._seen = None  # the job's own hooks on top: ours stay, counting nothing more
            return
        self._torch._C._autograd._pop_saved_tensors_default_hooks()
        self._open, self._seen = False, None
        if sys.exc_info()[1] is None:
            self.taken = (self.taken or 0) + self._counted

    def take(self) -> int | None:
        """The step's activations (its observed forwards', summed), once."""
        taken, self.taken = self.taken, None
        return taken
