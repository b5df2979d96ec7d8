"""Where each rank's memory goes, from what it said at its steps (engine/rank/watch/memory/):

- **parameters, buffers, gradients, optimizer**: read directly from its objects as its last step
  ended, each storage counted once (exact, to the byte);
- **activations**: the largest count of the tensors its model's forward saved for backward, on a
  step the watch observed (null: no step was observed);
- **rest**: its peak (the CUDA allocator's, or on the CPU the process's resident set, the Python
  and torch runtime included) less all of the above: the step's temporaries, the allocator's
  reserve, and on the CPU the runtime (null where a figure is missing);
- **creep**: each step's loss kept alive with its graph (weak references to them, the rank's own
  exact count): ``kept_graphs`` (the most earlier steps' losses alive at once), ``growth_per_step``
  (bytes: the least-squares slope of its memory over the steps since it began keeping them) and
  ``kept_by`` (the line that keeps them, where the rank found it); null where none was kept.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field

from mgpu_tui.engine.protocol.events import MEMORY_PARTS, Step

LEAK_AT = 8  # earlier steps' losses alive with their graphs at once: a leak (the rank's own count)


@dataclass(frozen=True)
class MemoryParts:
    """One rank's memory taken apart (the module's docstring says how each figure is measured)."""

    rank: int
    step: int  # the step whose end the accounting read
    parameters: int
    buffers: int
    gradients: int
    optimizer: int
    activations: int | None = None
    peak_bytes: int | None = None  # the allocator's on CUDA; the process's resident set on the CPU
    rest: int | None = None
    kept_graphs: int | None = None  # creep: earlier steps' losses alive with their graphs at once
    growth_per_step: float | None = None  # bytes a step, since it began keeping them
    kept_by: str | None = None  # where they are kept ("the list `kept` in main(), train.py:98: ...")

    @property
    def held(self) -> int:
        """What its objects hold: parameters, buffers, gradients and optimizer state."""
        return self.parameters + self.buffers + self.gradients + self.optimizer

    @property
    def leaks(self) -> bool:
        return (self.kept_graphs or 0) >= LEAK_AT


MAX_POINTS = 4096  # a creeping rank's (step, memory) points kept for its slope, at most


@dataclass
class MemoryTrack:
    """What a rank said of its memory, step by step (the aggregator feeds it its step events)."""

    parts: tuple[int, ...] | None = None
    step: int = 0
    activations: int | None = None
    kept_graphs: int = 0
    kept_since: int | None = None  # the first step at which an earlier loss was still kept
    kept_by: str | None = None
    steps: array = field(default_factory=lambda: array("q"))  # steps since kept_since with a memory figure
    mem: array = field(default_factory=lambda: array("q"))  # their memory (mem_bytes)

    def add(self, event: Step) -> None:
        if event.memory_parts is None and not event.kept_graphs and self.kept_since is None:
            return  # a step that says nothing of it (a demo's, an older rank's): a backlog reads fast
        if event.memory_parts is not None:
            self.parts, self.step = event.memory_parts, event.step
        if event.activations_bytes is not None:
            self.activations = max(self.activations or 0, event.activations_bytes)
        if event.kept_graphs:
            self.kept_graphs = max(self.kept_graphs, event.kept_graphs)
            self.kept_since = event.step if self.kept_since is None else self.kept_since
        self.kept_by = event.kept_by or self.kept_by
        if event.mem_bytes is not None and self.kept_since is not None:
            self.steps.append(event.step)
            self.mem.append(event.mem_bytes)
            if len(self.steps) > MAX_POINTS:  # a week-long leak: every other point kept, evenly spread
                self.steps, self.mem = self.steps[::2], self.mem[::2]

    def figures(self, rank: int, peak: int | None) -> MemoryParts | None:
        if self.parts is None:
            return None
        held = dict(zip(MEMORY_PARTS, self.parts))
        rest = None
        if peak is not None and self.activations is not None:
            rest = max(0, peak - sum(self.parts) - self.activations)
        kept = self.kept_graphs or None
        growth = self.growth_since(self.kept_since) if kept and self.kept_since is not None else None
        return MemoryParts(
            rank, self.step, **held, activations=self.activations, peak_bytes=peak, rest=rest,
            kept_graphs=kept, growth_per_step=growth, kept_by=self.kept_by if kept else None,
        )  # fmt: skip

    def growth_since(self, first: int) -> float | None:
        """Bytes a step: the least-squares slope of the memory over the steps from ``first`` on."""
        points = [(s, m) for s, m in zip(self.steps, self.mem) if s >= first]
        if len(points) < 3:
            return None
        n = len(points)
        mean_s = sum(s for s, _ in points) / n
        mean_m = sum(m for _, m in points) / n
        spread = sum((s - mean_s) ** 2 for s, _ in points)
        return sum((s - mean_s) * (m - mean_m) for s, m in points) / spread if spread else None
