"""A finished run's memory beside the plan's, in words: what `run` prints under its summary and
the Run view's result panel shows (docs/run-view.md#peak-memory-against-the-plan)."""

from __future__ import annotations

from mgpu_tui.console import fmt_bytes, plain, table
from mgpu_tui.engine.run.memory.memory_parts import MemoryParts
from mgpu_tui.engine.run.summary import RunSummary
from mgpu_tui.reports.anatomy import EACH_RANK_AT_MOST


def memory_lines(summary: RunSummary) -> list[str]:
    """The largest rank's memory beside the plan's: its live tensors at their peak and its state
    (the planner's figures, docs/compare.md#the-memory-planner), and on the CPU what the process
    held, the runtime included."""
    rows = [m for m in summary.memory if m.predicted_total_bytes is not None]
    if not rows:
        return []
    top = max(rows, key=lambda m: m.tensor_peak_bytes or m.predicted_total_bytes or 0)
    parts = []
    if top.tensor_peak_bytes is not None:
        parts.append(f"tensors at their peak {fmt_bytes(top.tensor_peak_bytes)}")
    parts.append(f"planned {fmt_bytes(top.predicted_total_bytes)}")
    if top.state_as_planned is not None:
        verdict = "as" if top.state_as_planned else "NOT as"
        parts.append(f"state {fmt_bytes(top.measured_state_bytes)} ({verdict} planned)")
    if summary.device == "cpu" and top.peak_bytes is not None:
        parts.append(f"the process held {fmt_bytes(top.peak_bytes)} (the runtime besides)")
    return [f"memory, rank {top.rank}: " + ", ".join(parts)]


MEMORY_COLUMNS = ("parameters", "buffers", "gradients", "optimizer", "activations", "rest", "peak")


def _cells(m: MemoryParts) -> list[str]:
    activations = fmt_bytes(m.activations) if m.activations is not None else "n/a (none observed)"
    return [
        fmt_bytes(m.parameters), fmt_bytes(m.buffers), fmt_bytes(m.gradients), fmt_bytes(m.optimizer),
        activations, fmt_bytes(m.rest), fmt_bytes(m.peak_bytes),
    ]  # fmt: skip


def memory_parts_lines(summary: RunSummary) -> list[str]:
    """Where each rank's memory goes (engine/run/memory/memory_parts.py), as a table like the step's
    parts (none where no rank took it apart), then a leak, where a rank keeps its losses' graphs."""
    parts = summary.memory_parts
    if not parts:
        return []
    peak = "the allocator's peak" if summary.device.startswith("cuda") else "the process's peak RSS"
    head = (
        f"where the memory goes (each rank at its last step's end; activations on an observed step; "
        f"rest: {peak} less the rest)"
    )
    rows = [[f"rank {m.rank}", *_cells(m)] for m in parts[:EACH_RANK_AT_MOST]]
    lines = [head, table(["", *MEMORY_COLUMNS], rows, right=tuple(range(1, len(MEMORY_COLUMNS) + 1)))]
    return lines + [plain(line) for m in parts if m.leaks for line in creep_lines(m)]


def creep_lines(m: MemoryParts) -> list[str]:
    growth = f"{fmt_bytes(m.growth_per_step)} a step" if m.growth_per_step is not None else "n/a"
    where = f"; kept by {m.kept_by}" if m.kept_by else "; what keeps them is not in Python's references"
    return [
        f"memory creeps, rank {m.rank}: the losses of {m.kept_graphs} earlier steps are still alive with "
        f"their graphs (growth {growth}){where}",
        "  try: keep loss.item() or loss.detach(), not the loss itself",
    ]
