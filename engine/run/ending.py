"""The end of a run: its root cause (a failure's, told apart from a rank that had finished its work
before it died), its summary built and written, and everything it held let go, the monitor's lock
last (whoever sees the lock go finds the result)."""

from __future__ import annotations

import dataclasses
import socket
import time
from typing import TYPE_CHECKING

from mgpu_tui.engine.nodes.view import NodeView
from mgpu_tui.engine.protocol.causes import RootCause
from mgpu_tui.engine.protocol.heartbeat import NodeState
from mgpu_tui.engine.protocol.rundir_make import RunDirError
from mgpu_tui.engine.run.causes import out_of_memory
from mgpu_tui.engine.run.causes.rootcause import (
    after_finishing,
    command_root_cause,
    find_root_cause,
    hint_for,
)
from mgpu_tui.engine.run.nccl.nccl_record import nccl_figures
from mgpu_tui.engine.run.summary import RunStatus, RunSummary
from mgpu_tui.engine.run.verify import Verification, Verify
from mgpu_tui.engine.run.watched import RunState, final_state

if TYPE_CHECKING:
    from mgpu_tui.engine.run.lifecycle import Run

# Once a command's processes are gone, how long its last output may take to reach its log and the
# console (a terminal that does not read holds only the console, never the summary, past this).
OUTPUT_END_S = 10.0


def ran_to_its_end(run: Run, rank: int | None) -> tuple[int, str | None] | None:
    """(its steps, its process group at the end) for a script's rank that ran its script to the
    end (its bootstrap said done) before it died; None otherwise."""
    spec = run.resolved.spec
    stats = next((r for r in run._ingest.stats().ranks if r.rank == rank), None)
    # process_group: said by the bootstrap's own done, at the script's end (a Reporter's done,
    # said by the script itself, may come before it ends).
    if not spec.program or stats is None or stats.process_group is None or stats.error:
        return None
    return stats.last_step, stats.process_group


def work_finished(run: Run, rank: int) -> bool:
    """Whether a rank had done all its work: it said so, or it reached the last step of a mode."""
    stats = next((r for r in run._ingest.stats().ranks if r.rank == rank), None)
    if stats is None:
        return False
    spec = run.resolved.spec
    own_program = bool(spec.program)  # its steps are its own: only `done` says
    return stats.done or (not own_program and stats.last_step >= spec.steps)


def how_it_ended(run: Run, returncode: int | None) -> tuple[RunState, RootCause | None]:
    """The run's final state, and a failure's root cause: the stall watch's or another node's, a
    command's, or the launcher's and ranks' own (a rank that had finished its work said so)."""
    ended_by_watchdog, root_cause = run._watchdog.verdict(returncode)
    if run._node_cause is not None:  # another node, or the rendezvous, ended it
        ended_by_watchdog, root_cause = True, run._node_cause
    state = final_state(returncode, stalled=ended_by_watchdog, stop_requested=run._stop_requested)
    errors, trainer_errors = run._ingest.errors(), run._ingest.trainer_errors()
    if state is RunState.OK and run._command and (errors or trainer_errors):
        state = RunState.FAILED  # a rank or trainer that raised failed, whatever its parent's exit code
    if state is not RunState.FAILED:
        root_cause = None
    elif root_cause is None and run._command:
        root_cause = command_root_cause(run.run_dir, returncode, errors, trainer_errors)
        finished = ran_to_its_end(run, root_cause.rank)
        if finished is not None:
            root_cause = after_finishing(root_cause, *finished)
    elif root_cause is None:
        spec = run.resolved.spec
        root_cause = find_root_cause(
            run.run_dir,
            launcher_exit_code=returncode,
            single_process=not run.resolved.mode.multi_process,
            rank_offset=spec.node_rank * (spec.nproc or 1),
            errors=run._ingest.errors(),
            program=bool(spec.program),
            stopped_rank=run.stopped_rank,
        )
        finished = ran_to_its_end(run, root_cause.rank)
        if finished is not None:  # a script's rank that said done: its training had finished
            root_cause = after_finishing(root_cause, *finished)
        elif root_cause.rank is not None and work_finished(run, root_cause.rank):
            root_cause = dataclasses.replace(root_cause, hint=hint_for(root_cause, work_finished=True))
        if spec.nnodes > 1 and root_cause.rank is not None:  # which host, as every node will say it
            root_cause = dataclasses.replace(root_cause, host=socket.gethostname())
    return state, out_of_memory.if_killed(root_cause, run.oom_kills_before)  # the kernel's OOM killer


def finish(run: Run, verify: Verify | None) -> None:
    """Settle with the other nodes, build and write the summary, let everything go."""
    returncode = run._exit_code
    state, root_cause = how_it_ended(run, returncode)
    nodes: tuple[NodeView, ...] = ()
    if run._nodes is not None:  # tell the others how this node ended; hear who failed first
        root_cause = run._nodes.settle(NodeState(state.value), run._steps_here(), root_cause)
        nodes = run._nodes.view()
        run._nodes.close()
    if foreign := sorted(run._ingest.foreign_files):
        run.log.warning(
            "not read: event files of %d rank(s) outside the job's 0..%d (%s)",
            len(foreign),
            (run.world_size or 0) - 1,
            ", ".join(f"rank{r}" for r in foreign[:10]),
        )
    if run.resolved.spec.nnodes == 1:  # the ranks' last flight-recorder dumps: who arrived late
        run._ingest.read_flight_records(run.ranks_here())
    telemetry = run._telemetry.stop() if run._telemetry is not None else None
    processes = run._tree.processes_seen(run._local_pids()) if run._command else ()
    run.summary = RunSummary.build(
        run.resolved,
        str(run.run_dir.path),
        run._ingest.stats(fresh=True),
        status=RunStatus(state.value),  # a finished state: ok, failed or interrupted
        exit_code=returncode,
        root_cause=root_cause,
        started_at=run._started_at,
        ended_at=time.time(),
        malformed_events=run._ingest.malformed_events,
        verify=verify,
        stall=run.stall,
        pid_ok=run._tree.is_rank_here,
        telemetry=telemetry,
        nccl=nccl_figures(run.run_dir) if run.resolved.backend == "nccl" else None,
        nodes=nodes,
        stopped_by=run._stopped_by,
        world_size=believed_world(run, processes),
        processes=processes,
    )
    try:
        run.run_dir.write_json(run.run_dir.summary_path, run.summary.to_json())
    except RunDirError as exc:  # a full disk: the summary is still shown, only not kept
        run.log.error("%s", exc)
    run.log.info(
        "%s%s%s",
        state.value,
        f"; {root_cause.headline()}" if root_cause else "",
        f"; verify: {verify.describe()}" if verify else "",
    )
    run._ingest.close()
    run._watchdog.close()
    run._tree.close()
    run.log.close()
    run.state = state
    run._monitor.release()  # after the summary: whoever sees the lock go finds the result


def believed_world(run: Run, processes: tuple) -> int | None:
    """A command's world size as its ranks said it, within what could be true: its ranks are
    processes of this machine's tree (exec runs on one node), so a hello that claims more than the
    processes seen (and the ranks heard from) is not believed past them."""
    world = run.world_size
    if not run._command or not world:
        return world
    heard = run._ingest.rank_processes()
    bound = max(len(processes), max(heard, default=-1) + 1)
    if world > bound:
        run.log.warning(
            "a rank said the world size is %d, but %d process(es) ran: the job's is taken as %d",
            world,
            len(processes),
            bound,
        )
        return bound
    return world


def launcher_ended(run: Run, returncode: int) -> None:
    """The launcher exited: nothing of the run may outlive it; the ranks' last events read; then
    the verification (asked for, and the run went well), or the end."""
    run._exit_code = returncode
    run.log.info("the launcher exited with %d", returncode)
    # torchrun has ended its ranks when it exits normally; anything still alive
    # (after a hard kill, say) must not outlive the run.
    run._tree.kill_all()
    if run.output is not None and not run.output.finish(timeout=OUTPUT_END_S):
        run.log.warning("the command's output was still being copied %.0f s after its end", OUTPUT_END_S)
    if skipped := run._ingest.catch_up():  # what the ranks wrote last, however much it was
        run.log.warning(
            "%d rank(s) wrote events faster than they could be read: their figures stop where "
            "reading did, and their last steps come from the ends of their files",
            skipped,
        )
    if returncode == 0 and run.resolved.spec.verify and not run._stop_requested and run.stall is None:
        run._verification = Verification(run.resolved, run.run_dir, python=run.python, env=run.launch.env)
        run.log.info("verifying against the single-device baseline (pid %d)", run._verification.pid)
        run.state = RunState.VERIFYING
        return
    finish(run, None)
