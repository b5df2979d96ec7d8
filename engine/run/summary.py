"""The summary of a finished run: ``summary.json``, and the CLI's ``--json`` line.

Fields (a stable contract; new ones may be added):

- ``mode``, ``status`` ("ok", "failed" or "interrupted"), ``exit_code`` (the launcher's),
  ``device``, ``backend``, ``world_size``, ``steps`` (the last step every rank reached),
- ``samples_per_s`` (global, steady state), ``step_time_s_median``, ``step_time_s_p10_p90``,
  ``final_loss`` (the full global batch at the last step),
- ``peak_mem_bytes``: a list indexed by rank (allocator peak on CUDA, peak RSS on the CPU),
- ``ranks``: per-rank figures, ``launch_to_first_step_s``, ``duration_s``,
  ``malformed_events``, ``run_dir``, ``root_cause`` (null, or rank, exit_code, signal,
  message, traceback), ``note`` (one sentence on what the figures do not show: a degenerate
  CPU path, or ranks sharing GPUs; or null), ``shared_gpus`` (--share-gpus put more ranks than GPUs),
  ``verify`` (with --verify: max_abs_diff, max_rel_diff, tolerance, ok; else null).

See aggregate.py for how each figure is computed.
"""

from __future__ import annotations

from mgpu_tui.engine.launch.spec import ResolvedSpec
from mgpu_tui.engine.run.aggregate import RunStats
from mgpu_tui.engine.run.rootcause import RootCause
from mgpu_tui.engine.run.rundir import RunDir

SHARED_GPUS_NOTE = ("the ranks share GPUs (--share-gpus) and talk over gloo: the results are correct, "
                    "but the timings say nothing about a box with a GPU for each rank.")


def run_note(resolved: ResolvedSpec) -> str | None:
    """What this run's figures do not show, in one sentence, or None."""
    if resolved.shared_gpus:
        return SHARED_GPUS_NOTE
    if resolved.device == "cpu" and resolved.mode.cpu_note:
        return f"on the CPU {resolved.mode.cpu_note}"
    return None


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
        "shared_gpus": resolved.shared_gpus,
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
        "note": run_note(resolved),
        "verify": None,  # filled in by --verify
    }
