"""One rank's memory, as its watch (script_watch.py) hands it the moments: an optimizer stepped, a
step ended, an observed step's forward began and ended, a backward's loss, an exception."""

from __future__ import annotations

from typing import Any

from mgpu_tui.engine.rank.watch.memory.accounting import Accounting


class MemoryWatch:
    """The accounting of each step (accounting.py), read where a step ends."""

    def __init__(self) -> None:
        self.accounting = Accounting()
        self.last: dict[str, int] | None = None  # the last step's accounting

    def optimizer_stepped(self, optimizer: Any) -> None:
        self.accounting.optimizer_stepped(optimizer)

    def at_step(self, torch: Any, root: Any) -> dict[str, int] | None:
        """The accounting as the step ends (after its optimizer step: its gradients still held)."""
        self.last = self.accounting.read(torch, root)
        return self.last
