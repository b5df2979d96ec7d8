"""A finished run's memory beside the plan's, in words: what `run` prints under its summary and
the Run view's result panel shows (docs/run-view.md#peak-memory-against-the-plan)."""

from __future__ import annotations

from mgpu_tui.console import fmt_bytes
from mgpu_tui.engine.run.summary import RunSummary


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
