"""One rank's memory, as its watch (script_watch.py) hands it the moments: an optimizer stepped, a
step ended, an optimizer was made, an exception left the script."""

from __future__ import annotations

import sys
from typing import Any

from mgpu_tui.engine.rank.watch.memory import failure
from mgpu_tui.engine.rank.watch.memory.accounting import Accounting
from mgpu_tui.engine.rank.watch.memory.creep import Creep
from mgpu_tui.engine.rank.watch.model_root import find_root


class MemoryWatch:
    """The accounting of each step (accounting.py), read where a step ends; an out-of-memory's."""

    def __init__(self) -> None:
        self.accounting = Accounting()
        self.last: dict[str, int] | None = None  # the last step's accounting
        self.creep = Creep()  # each step's loss, kept alive with its graph: a leak (creep.py)
        self.before_training: int | None = None  # the address space as its first optimizer was made

    def optimizer_stepped(self, optimizer: Any) -> None:
        """An optimizer made or stepped; the first one made: where the address space stood (an
        estimate's base should step 1 run out of memory: the model built, nothing trained yet)."""
        if self.before_training is None:
            self.before_training = failure.address_space()
        self.accounting.optimizer_stepped(optimizer)

    def at_step(self, torch: Any, root: Any, step: Any) -> None:
        """The accounting as ``step`` ends (after its optimizer step: its gradients still held), and
        the earlier steps' losses it still keeps (the main thread's frames: where they are kept)."""
        step.accounted = self.last = self.accounting.read(torch, root)
        step.kept_graphs = self.creep.at_step(step.step, sys._getframe(1))
        step.kept_by = self.creep.kept_by if step.kept_graphs else None

    def is_out_of_memory(self, exc: BaseException) -> bool:
        return failure.kind_of(exc) is not None

    def at_failure(self, torch: Any, exc: BaseException, root: Any, clock: Any, step: int, device: Any):
        """The error event's ``out_of_memory`` for an out-of-memory (None for any other exception):
        its phase the step clock's part it raised in (step_clock.StepClock.raised_in)."""
        kind = failure.kind_of(exc)
        if kind is None or torch is None:
            return None
        raised = clock.raised_in
        phase = raised[0] if raised is not None and raised[1] == id(exc) else "between the step's parts"
        said = failure.fields(torch, kind, exc, device)
        if root is None:  # before its first step: the model that holds what its optimizers step
            root = next((find_root(o, None, torch.nn.Module) for o in self.accounting.optimizers()), None)
        parts = self.accounting.read(torch, root)
        return {
            **said, "phase": phase, "step": step, "memory_parts": parts,
            "base_bytes": self.before_training if kind == "cpu" and step == 1 else None,
        }  # fmt: skip
