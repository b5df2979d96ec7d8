"""The start of a run: its spec resolved against the host, its folder created (named by the mode
and the user's word, or shared by a job's nodes), and ``spec.json`` written, the record of what ran
where. Nothing is left behind when it cannot be."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from mgpu_tui import __version__
from mgpu_tui.engine.launch.job_output import JobOutput
from mgpu_tui.engine.launch.spec import LaunchSpec, resolve
from mgpu_tui.engine.machine import host as host_module
from mgpu_tui.engine.protocol.rundir import RunDir
from mgpu_tui.engine.protocol.rundir_make import RunDirError, folder_name
from mgpu_tui.engine.run.causes.watchdog import MIN_FREE_BYTES
from mgpu_tui.engine.run.figures.telemetry_log import TelemetryLog

if TYPE_CHECKING:
    from mgpu_tui.engine.run.lifecycle import Run


def prepare(
    cls: type[Run],
    spec: LaunchSpec,
    host: host_module.Host | None = None,
    *,
    name: str | None = None,
    **kwargs,
) -> Run:
    """Resolve the spec, create its run directory and write ``spec.json``.

    ``name`` ends the run folder's name (default: the mode's). Raises SpecError,
    EnvironmentUnusable or RunDirError, each with a sentence for the user.
    """
    host = host or host_module.probe()
    resolved = resolve(spec, host)
    name = name or resolved.mode.name
    if spec.name:  # the user's own word for it, after the mode's: 20261125T101500Z-ddp-baseline
        name = f"{name}-{folder_name(spec.name)}"
    if spec.nnodes > 1:  # the nodes of one job share a folder when their run roots are shared
        run_dir = RunDir.create(spec.run_root, name, node=spec.node_rank, shared=spec.rdzv_id)
    elif spec.slurm is not None:  # one node of a Slurm job: named by its job and step, not the clock
        run_dir = RunDir.create(spec.run_root, name, shared=spec.slurm.run_id)
    else:
        run_dir = RunDir.create(spec.run_root, name)
    run = None
    try:
        run_dir.require_room(MIN_FREE_BYTES)
        run = cls(resolved, run_dir, **kwargs)
        run_dir.write_json(
            run_dir.spec_path,
            {
                "spec": resolved.to_json(),
                "run_id": run.run_id,
                "argv": list(run.launch.argv),
                "env_changes": run.launch.env_changes,
                "created_at": time.time(),
                "mgpu_tui_version": __version__,
                # Which machine ran it: runs compared from their records must say when they differ.
                "machine": {
                    "hostname": socket.gethostname(),
                    "cpu_count": host.cpu_count,
                    "gpu_count": host.gpu_count,
                    "gpu_note": host.gpu_note,
                },
            },
        )
    except RunDirError:
        if run is not None:
            run.log.close()
        run_dir.discard()  # nothing ran: leave no empty run behind
        raise
    return run


def start_launcher(run: Run) -> None:
    """Start the run's process tree (launch/processes.py), its output where it goes: a mode's and a
    script's to their files; a command's own (exec) through pipes or pseudo-terminals that copy
    every byte to its log and, in the foreground, to the console (launch/job_output.py)."""
    resolved, foreground = run.resolved, run.foreground
    try:
        out, err = run.run_dir.open_launcher_output(
            one_process=not resolved.mode.multi_process, command=run._command
        )
        if run._command:
            console = (foreground.stdout, foreground.stderr) if foreground is not None else (None, None)
            try:
                run.output = JobOutput((out, err), console)
            except OSError as exc:  # no pseudo-terminal or pipe left to make
                out.close()
                err.close()
                raise RunDirError(f"cannot make the job's output streams: {exc.strerror or exc}.") from None
    except RunDirError:
        run._let_go()
        run.log.close()
        raise
    in_front = foreground.keeper_args() if foreground is not None else None
    try:
        if run.output is not None:
            run._tree.start(*run.output.child_ends(), grace=run.stop_grace, foreground=in_front)
            run.output.started()
        else:
            run._tree.start(out, err, grace=run.stop_grace, foreground=in_front)
    except BaseException:
        run._let_go()
        raise
    finally:
        if run.output is None:
            out.close()
            err.close()
    run.log.info(
        "started %s, %s rank(s) on %s (%s): pid %d, %s",
        resolved.mode.name,
        resolved.world_size or "its own",
        resolved.device,
        resolved.process_group or "no process group",
        run._tree.started.pid,
        " ".join(run.launch.argv),
    )


def start_telemetry(
    run: Run, run_processes: Callable[[], Iterable[tuple[int, float]]]
) -> TelemetryLog | None:
    """The machine during the run, kept with it (figures/telemetry_log.py), where the spec samples it;
    the run's own processes (``run_processes``) are not "other" for BUSY MACHINE."""
    interval = run.resolved.spec.sample_interval
    if not interval:
        return None
    telemetry = TelemetryLog(
        run.run_dir.telemetry_path, interval=interval, ranks=run.rank_processes, run_processes=run_processes
    )
    telemetry.start()
    return telemetry
