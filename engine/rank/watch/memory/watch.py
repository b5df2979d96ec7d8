"""One rank's memory, as its watch (script_watch.py) hands it the moments: an optimizer stepped, a
step ended, an optimizer was made, an exception left the script."""

from __future__ import annotations

import math
import sys
import time
from typing import Any

from mgpu_tui.engine.rank.watch.memory import failure
from mgpu_tui.engine.rank.watch.memory.accounting import Accounting
from mgpu_tui.engine.rank.watch.memory.creep import Creep
from mgpu_tui.engine.rank.watch.memory.saved import SavedTensors
from mgpu_tui.engine.rank.watch.model_root import find_root

BUDGET = 0.005  # of a step's time the accounting may take: a larger model's is read every few steps


class MemoryWatch:
    """The accounting of each step (accounting.py), read where a step ends; an out-of-memory's."""

    def __init__(self) -> None:
        self.accounting = Accounting()
        self.last: dict[str, int] | None = None  # the last step's accounting
        self.saved = SavedTensors()  # an observed step's activations (saved.py)
        self.creep = Creep()  # each step's loss, kept alive with its graph: a leak (creep.py)
        self._due, self._step_at = 0, time.perf_counter()  # the next step read, the last one's end
        self.before_training: int | None = None  # the address space as its first optimizer was made

    def optimizer_stepped(self, optimizer: Any) -> None:
        """An optimizer made or stepped; the first one made: where the address space stood (an
        estimate's base should step 1 run out of memory: the model built, nothing trained yet)."""
        if self.before_training is None:
            self.before_training = failure.address_space()
        self.accounting.optimizer_stepped(optimizer)

    def at_step(self, torch: Any, root: Any, step: Any) -> None:
        """The accounting as ``step`` ends (after its optimizer step: its gradients still held), and
        the earlier steps' losses it still keeps (the main thread's frames: where they are kept).
        Nothing while Dynamo traces the step (a compiled training step): storages there are not the
        job's, and reading them would break its graph."""
        compiler = getattr(torch, "compiler", None)
        if compiler is not None and compiler.is_compiling():
            return
        now = time.perf_counter()
        if step.step >= self._due:  # within its budget (BUDGET): a slow read comes every few steps
            step.accounted = self.last = self.accounting.read(torch, root)
            took, since = time.perf_counter() - now, now - self._step_at
            self._due = step.step + max(1, math.ceil(took / (BUDGET * since))) if since > 0 else step.step + 1
        self._step_at = now
        step.activations = self.saved.take() if step.counted.observed else None
        step.kept_graphs = self.creep.at_step(step.step, sys._getframe(1))
        step.kept_by = self.creep.kept_by if step.kept_graphs else None

    def window(self, torch: Any, edge: str, flops: Any, args: tuple) -> None:
        """The FLOP count's edges (flops/step_flops.py): a forward it observes is observed here too."""
        if edge == "forward_begins" and flops is not None and flops.observing_forward:
            self.saved.open(torch, args[0])
        elif edge == "forward_ends" and (flops is None or not flops.observing_forward):
            self.saved.close()

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


def failure_fields(watch: Any, exc: BaseException) -> dict[str, Any]:
    """The error event's fields beyond the exception's, for the ScriptWatch ``watch``: an
    out-of-memory's (failure.py); nothing for any other exception, or where it cannot be read."""
    try:
        memory, root = watch.memory, watch._root.module()
        oom = memory.at_failure(watch.torch, exc, root, watch.clock, watch.steps + 1, watch._device)
    except Exception:  # noqa: BLE001 (the error is told all the same)
        return {}
    return {"out_of_memory": oom} if oom is not None else {}


def rank_at_failure(watch: Any, exc: BaseException | None) -> None:
    """A process that began training (an optimizer made, or a backward) with no process group and
    ran out of memory before its first step is a trainer of its own (alone: the job's one rank),
    so that its out-of-memory is told."""
    try:
        trained = watch._backwards or watch.memory.accounting.optimizers()  # a backward, an optimizer
        if exc is None or watch.reporter is not None or not trained or failure.kind_of(exc) is None:
            return
        if not watch.see_group():
            watch._become_rank(None, 1)  # a trainer of its own: alone, the job's one rank
    except Exception:  # noqa: BLE001
        return
