"""The summary of a finished run: ``summary.json``, and the CLI's ``--json`` line.

Fields (a stable contract; new ones may be added):

- ``mode``, ``status`` ("ok", "failed" or "interrupted"), ``exit_code`` (the launcher's),
  ``device``, ``backend``, ``world_size``, ``steps`` (the last step every rank reached),
- ``samples_per_s`` (global, steady state), ``step_time_s_median``, ``step_time_s_p10_p90``,
  ``final_loss`` (the full global batch at the last step),
- ``peak_mem_bytes``: a list indexed by rank (allocator peak on CUDA, peak RSS on the CPU),
- ``ranks``: per-rank figures, ``launch_to_first_step_s``, ``duration_s``,
  ``malformed_events``, ``run_dir``, ``root_cause`` (null, or rank, exit_code, signal,
  message, traceback), ``note`` (what a degenerate CPU path does not show, or null),
  ``verify`` (with --verify: max_abs_diff, max_rel_diff, tolerance, ok; else null).

See aggregate.py for how each figure is computed.
"""

from __future__ import annotations

from mgpu_tui.engine.aggregate import RunStats
from mgpu_tui.engine.rootcause import RootCause
from mgpu_tui.engine.rundir import RunDir
from mgpu_tui.engine.spec import ResolvedSpec


def build_summary(
    resolved: ResolvedSpec,
    run_dir: RunDir,
    stats: RunStats,
    *,
    status: str,
    exit_code: int | None,
    root_cause: RootCause | None,
    started_at: float,
    ended_at: float,
    malformed_events: int,
) -> dict:
    world = stats.world_size or resolved.world_size
    peaks = stats.peak_mem_bytes()
    return {
        "mode": resolved.mode.name,
        "program": resolved.spec.script or resolved.spec.module,  # with --script / --module
        "status": status,
        "exit_code": exit_code,
        "device": resolved.device,
        "backend": resolved.backend,
        "world_size": world,
        "nnodes": resolved.spec.nnodes,
        "node_rank": resolved.spec.node_rank,
        "steps": stats.steps,
        "steps_requested": resolved.spec.steps,
        "batch_size": resolved.spec.batch_size,
        "samples_per_s": stats.samples_per_s,
        "step_time_s_median": stats.step_time_s_median,
        "step_time_s_p10_p90": list(stats.step_time_s_spread) if stats.step_time_s_spread else None,
        "final_loss": stats.final_loss,
        "peak_mem_bytes": [peaks.get(rank) for rank in range(world)],
        "ranks": [
            {
                "rank": r.rank,
                "last_step": r.last_step,
                "samples_per_s": r.samples_per_s,
                "loss": r.loss,
                "peak_mem_bytes": r.mem_peak_bytes,
                "device": r.device,
                "pid": r.pid,
                "done": r.done,
            }
            for r in stats.ranks
        ],
        "launch_to_first_step_s": (
            stats.first_step_t - started_at if stats.first_step_t is not None else None
        ),
        "duration_s": ended_at - started_at,
        "malformed_events": malformed_events,
        "run_dir": str(run_dir.path),
        "root_cause": root_cause.to_json() if root_cause else None,
        # What this run does not show on this device (degenerate CPU paths), in one sentence.
        "note": resolved.mode.cpu_note if resolved.device == "cpu" and resolved.mode.cpu_note else None,
        "verify": None,  # filled in by --verify
    }
