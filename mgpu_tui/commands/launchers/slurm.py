"""Slurm: `mgpu-tui run` inside a step takes its node options from Slurm (:func:`from_slurm`), a
run that Slurm stops says why (:func:`why_slurm_stopped`), and `mgpu-tui slurm` writes the
batch script of a job (:func:`slurm_command`). What Slurm's variables mean: engine/launch/slurm.py.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shlex
import sys
import time
from collections.abc import Callable, Mapping, MutableMapping
from pathlib import Path

from mgpu_tui.engine.launch.slurm import (
    NodeOptions,
    SlurmEnvironmentError,
    SlurmJob,
    node_options,
    slurm_job,
    task_device,
)
from mgpu_tui.engine.planning.defaults import DEFAULTS as D
from mgpu_tui.engine.protocol.rundir_make import folder_name
from mgpu_tui.errors import UsageError

NODE_FLAGS = tuple(f.name for f in dataclasses.fields(NodeOptions))  # run's dests, NodeOptions' fields
SIGNAL_LEAD_S = 120  # the generated script's early SIGTERM before the time limit


def from_slurm(
    args: argparse.Namespace,
    environ: Mapping[str, str] = os.environ,
    address_of: Callable[[str], str | None] | None = None,
) -> tuple[SlurmJob | None, str | None]:
    """Inside a Slurm step, fill the node options the user left out from Slurm's environment
    (``args`` changed in place; explicit flags win); the job, and the line that says what came from
    Slurm. Outside Slurm: (None, None), and ``args`` as given (--nnodes 1, --node-rank 0)."""
    try:
        job = slurm_job(environ)
    except SlurmEnvironmentError as exc:
        raise UsageError(f"Slurm's environment does not read as Slurm writes it: {exc}.") from None
    given = frozenset(flag for flag in NODE_FLAGS if getattr(args, flag) is not None)
    if job is None or job.step_id is None:  # outside a step (a batch script's own line): one node
        args.nnodes = 1 if args.nnodes is None else args.nnodes
        args.node_rank = 0 if args.node_rank is None else args.node_rank
        return job, None
    if not job.one_task_per_node and (args.nproc or 1) != 1:
        raise UsageError(
            f"this Slurm step runs {job.tasks_per_node} tasks a node, each one rank: leave out --nproc "
            "(or start one task a node, srun --ntasks-per-node=1, and give its ranks with --nproc)."
        )
    if address_of is None:  # Slurm's controller, asked (machine/slurm.py)
        from mgpu_tui.engine.machine.slurm import node_address

        address_of = node_address
    ask = job.ntasks > 1 and "rdzv_endpoint" not in given  # the first node, as Slurm reaches it
    options = node_options(job, address_of(job.hosts[0]) if ask else None)
    for flag in NODE_FLAGS:
        if flag not in given:
            setattr(args, flag, getattr(options, flag))
    return job, options.said(job, given)


def bind_task_gpu(job: SlurmJob | None, environ: MutableMapping[str, str] = os.environ) -> None:
    """A step of several tasks a node: this task's rank gets its own GPU of the node
    (CUDA_VISIBLE_DEVICES), unless Slurm bound one already (launch/slurm.py: task_device)."""
    if job is None or job.step_id is None:
        return
    if (device := task_device(job, environ.get("CUDA_VISIBLE_DEVICES"))) is not None:
        environ["CUDA_VISIBLE_DEVICES"] = device


def why_slurm_stopped(job: SlurmJob | None) -> str | None:
    """Under Slurm, after a SIGTERM: "cancelled" or "time limit", as the controller tells it."""
    if job is None:
        return None
    from mgpu_tui.engine.machine.slurm import job_state, why_ended

    return why_ended(job_state(job.job_id), time.time())


def sbatch_value(option: str, value: str) -> str:
    """A value an ``#SBATCH`` line can hold as one word: a newline would end the directive and start
    a line of shell (sbatch runs it), a space would split it. UsageError, one sentence, otherwise."""
    if not value or any(c.isspace() or not c.isprintable() for c in value):
        raise UsageError(
            f"{option} {value!r}: an #SBATCH line takes one word, with no space or control character."
        )
    return value


def batch_script(args: argparse.Namespace, run_args: list[str]) -> str:
    """The sbatch script of a job that runs ``mgpu-tui run`` on ``args.nodes`` nodes. Every value
    of an ``#SBATCH`` line is one word (sbatch_value); the job's default name is the script's, made
    a name (a file name may hold anything)."""
    what = ["--script", args.script] if args.script else [args.mode]
    join = D.join_timeout + 2 * args.nodes  # rendezvous grows with the nodes
    default_name = folder_name(Path(args.script).stem) if args.script else args.mode
    sbatch = [
        f"--job-name={sbatch_value('--job-name', args.job_name or default_name)}",
        f"--nodes={args.nodes}",
        "--ntasks-per-node=1",  # one mgpu-tui per node; it starts the node's ranks
        f"--time={sbatch_value('--time', args.time)}",
        # SIGTERM to every process of the step 2 min before the limit: each node stops its ranks,
        # writes its summary and says "time limit" (a scancel is said as "cancelled").
        f"--signal=TERM@{SIGNAL_LEAD_S}",
        f"--output={sbatch_value('--output', args.output)}",
    ]
    if args.gpus_per_node:
        sbatch.append(f"--gpus-per-node={args.gpus_per_node}")
    if args.partition:
        sbatch.append(f"--partition={sbatch_value('--partition', args.partition)}")
    if args.account:
        sbatch.append(f"--account={sbatch_value('--account', args.account)}")
    nproc = ["--nproc", str(args.nproc)] if args.nproc else []
    step = ["srun", "mgpu-tui", "run", *what, *nproc, "--join-timeout", str(int(join)), "--json"]
    # The default run folder is the submit directory's, which the shell expands on the node.
    run_dir = shlex.quote(args.run_dir) if args.run_dir else '"$SLURM_SUBMIT_DIR/runs"'
    line = " ".join(map(shlex.quote, step)) + f" --run-dir {run_dir}"
    if run_args:  # run's own options as given, and after a second --, the program's
        line += " " + " ".join(map(shlex.quote, run_args))
    return "\n".join(
        [
            "#!/bin/bash",
            *(f"#SBATCH {option}" for option in sbatch),
            "#",
            "# Written by `mgpu-tui slurm`. Each node's mgpu-tui reads the job from Slurm: the nodes,",
            "# this node's rank, the first node as the rendezvous (port and id from the job and step),",
            "# and its GPUs as its ranks. The run folder must be on a filesystem every node mounts.",
            "# Follow it from the login node: mgpu-tui open $SLURM_JOB_ID --run-dir <the same folder>",
            "",
            "# mgpu-tui sets these for every rank already; change them here if you want others:",
            "#   TORCH_FR_BUFFER_SIZE=2000 (the flight recorder, whose records explain a hang),",
            "#   NCCL_DEBUG=INFO, NCCL_DEBUG_SUBSYS=INIT,GRAPH,ENV, into the run folder.",
            "export TORCH_NCCL_DUMP_ON_TIMEOUT=1  # NCCL's watchdog dumps the flight records on a timeout",
            "",
            line,
            "",
        ]
    )


def slurm_command(args: argparse.Namespace, run_args: list[str]) -> int:
    if bool(args.mode) == bool(args.script):
        raise UsageError("give a mode (ddp, fsdp, ...) or --script FILE, one of them.")
    if args.mode:
        from mgpu_tui.engine.planning.modes import MODES, unknown_mode

        if args.mode not in MODES:
            raise UsageError(unknown_mode(args.mode))
    sys.stdout.write(batch_script(args, run_args))
    return 0
