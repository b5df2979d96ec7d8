"""``mgpu-tui torchrun ARGS...``: torchrun's own command line, run and watched as `run --script` runs it.

torchrun's arguments are read by torchrun's own parser in a child process (the command line never
imports torch: engine/rank/torchrun_args.py), so a batch script or a manifest changes one word:
``torchrun`` becomes ``mgpu-tui torchrun``. mgpu-tui's own watch options (parser.add_watch_options)
may stand among torchrun's, before the script. What torchrun would do that mgpu-tui does its own
way is said in a line: a free port instead of 29500, every rank's output kept (--log-dir, --tee),
a static rendezvous of several nodes held by mgpu-tui's c10d one.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from mgpu_tui.commands.launchers import torchrun_cache
from mgpu_tui.commands.launchers.slurm import bind_task_gpu, from_slurm
from mgpu_tui.commands.run import follow, launch_nice
from mgpu_tui.engine.launch import options
from mgpu_tui.engine.launch.errors import EnvironmentUnusable
from mgpu_tui.engine.launch.slurm import SlurmJob
from mgpu_tui.engine.launch.spec import LaunchSpec
from mgpu_tui.engine.protocol.typed import Invalid, build
from mgpu_tui.errors import UsageError
from mgpu_tui.reports.rank_output import parse_ranks_filter

PARSE_TIMEOUT_S = 120  # torch's import, on a slow file system
TORCHRUN_END_S = 15.0  # past its --shutdown-timeout, for torchrun to end its ranks and itself


@dataclass(frozen=True)
class TorchrunLine:
    """What torchrun's own parser read of the line (engine/rank/torchrun_args.py's "torchrun")."""

    program: str
    args: list[str]
    module: bool
    no_python: bool
    nproc: int
    nnodes: int
    node_rank: int
    rdzv_backend: str
    rdzv_endpoint: str | None
    rdzv_id: str | None
    rdzv_conf: str
    standalone: bool
    max_restarts: int
    master_addr: str | None
    master_port: int | None
    local_ranks_filter: str | None
    run_path: bool = False  # --run-path: the script run by runpy.run_path in each worker
    # --shutdown-timeout (or TORCH_ELASTIC_SHUTDOWN_TIMEOUT, or its 30 s): SIGTERM to SIGKILL of its ranks
    shutdown_timeout: float = 30.0


@dataclass(frozen=True)
class TorchrunAnswer:
    torchrun: TorchrunLine
    ours: list[str]  # mgpu-tui's own options found among torchrun's, for its parser
    passthrough: list[str]  # torchrun's settings mgpu-tui does not model, given as they were
    ignored: list[str]  # torchrun's output options, which mgpu-tui replaces with the run folder


def _our_options() -> list[tuple[str, int, str]]:
    """mgpu-tui's options for the child's parser: each long name, how many values it takes, its help."""
    from mgpu_tui.parser import build_torchrun_parser

    return [
        (a.option_strings[0], 0 if a.nargs == 0 else 1, a.help or "")
        for a in build_torchrun_parser()._actions
        if a.option_strings
    ]


def read_torchrun_line(argv: list[str]) -> TorchrunAnswer:
    """torchrun's arguments read by torchrun's parser (the child's JSON, or its answer to the same line
    kept: torchrun_cache.py); UsageError for bad input."""
    ours = _our_options()
    line_key = torchrun_cache.key(sys.executable, ours, argv, dict(os.environ))
    answer = torchrun_cache.recall(line_key)
    if answer is None:
        answer = _parsed(ours, argv)
        torchrun_cache.keep(line_key, answer)
    try:
        return build(TorchrunAnswer, answer)
    except Invalid as exc:  # parsed at the boundary: the child's answer, checked field by field
        raise EnvironmentUnusable(f"torchrun's parser gave an answer mgpu-tui cannot read ({exc}).") from None


def _parsed(ours: list[tuple[str, int, str]], argv: list[str]) -> dict:
    """torchrun's parser's answer, from a child that imports torch (the command line never does)."""
    try:
        done = subprocess.run(
            [sys.executable, "-m", "mgpu_tui.engine.rank.torchrun_args", json.dumps(ours), *argv],
            capture_output=True,
            text=True,
            timeout=PARSE_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        raise EnvironmentUnusable(f"reading torchrun's arguments took over {PARSE_TIMEOUT_S} s.") from None
    if done.returncode == 0 and not done.stdout.lstrip().startswith("{"):  # --help
        print(done.stdout.rstrip("\n"))
        raise SystemExit(0)
    try:
        answer = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        if "No module named 'torch'" in done.stderr:
            raise EnvironmentUnusable(
                "torch is not installed in this Python environment (see the README)."
            ) from None
        raise EnvironmentUnusable(f"torchrun's parser could not run: {last}") from None
    if isinstance(answer, dict) and "error" in answer:
        text = str(answer["error"]).replace("unrecognized arguments:", "torchrun does not know")
        raise UsageError(f"{text} (see mgpu-tui torchrun --help)")
    if not isinstance(answer, dict):
        raise EnvironmentUnusable("torchrun's parser gave an answer mgpu-tui cannot read (not an object).")
    return answer


def _nodes_from_slurm(
    t: TorchrunLine, endpoint: str | None
) -> tuple[SlurmJob | None, argparse.Namespace, str | None]:
    """The node options of torchrun's line (nnodes, node_rank, rdzv_endpoint, rdzv_id, nproc):
    inside a Slurm step, where the line names no node (torchrun's defaults: one node, no
    endpoint, port or id), Slurm's (commands/launchers/slurm.py); the job, and the line that says so."""
    given = {"nnodes": t.nnodes, "node_rank": t.node_rank, "rdzv_endpoint": endpoint}
    nodes = argparse.Namespace(**given, rdzv_id=t.rdzv_id, nproc=t.nproc)
    if t.nnodes != 1 or t.node_rank or endpoint or t.master_port or t.rdzv_id:
        return None, nodes, None  # the line says where the nodes meet: as given
    # What torchrun's defaults leave open, Slurm's environment says (where there is one).
    nodes.nnodes = nodes.node_rank = nodes.rdzv_endpoint = None
    job, said = from_slurm(nodes)
    bind_task_gpu(job)
    return job, nodes, said


def _checked(option: str, value: object, flag: str | None = None):
    """torchrun's value through mgpu-tui's own table of options: its bounds, its sentence."""
    try:
        return options.OPTIONS[option].check(value, flag)
    except ValueError as exc:
        raise UsageError(f"{exc} (see mgpu-tui torchrun --help)") from None


def _within_bounds(t: TorchrunLine) -> None:
    """The counts torchrun's parser read, held to the bounds `run` holds them to (torchrun takes
    --nnodes 1000000000000, and a job of that many nodes was followed, node by node, every poll)."""
    _checked("nnodes", t.nnodes, "--nnodes")
    _checked("node_rank", t.node_rank, "--node-rank")
    _checked("nproc", t.nproc, "--nproc-per-node")


def _join_timeout(rdzv_conf: str, given: float) -> float:
    """--rdzv-conf's join_timeout (is_host is torchrun's to decide, and ignored); any other key is
    refused: mgpu-tui sets the rendezvous itself."""
    join_timeout = given
    for item in filter(None, rdzv_conf.split(",")):
        key, _, value = item.partition("=")
        if key.strip() == "join_timeout":
            join_timeout = _checked("join_timeout", value, "--rdzv-conf join_timeout")
        elif key.strip() != "is_host":
            raise UsageError(
                f"--rdzv-conf {key.strip()}: mgpu-tui sets the rendezvous itself; only "
                "join_timeout is taken (see docs/multi-node.md)."
            )
    return join_timeout


def torchrun_command(argv: list[str]) -> int:
    from mgpu_tui.parser import build_torchrun_parser

    answer = read_torchrun_line(argv)
    args = build_torchrun_parser().parse_args(answer.ours)
    t = answer.torchrun
    _within_bounds(t)
    said = []
    if answer.ignored:
        said.append(f"{', '.join(answer.ignored)}: every rank's output is kept in the run folder instead")
    launcher_args = list(answer.passthrough)
    instrument = not args.no_instrument
    if t.no_python and t.module:  # as torchrun refuses it
        raise UsageError("--no-python and -m (--module) cannot go together: give the program to run.")
    if t.no_python:
        launcher_args.append("--no-python")
        instrument = False
        said.append("--no-python: the program runs bare (the bootstrap needs Python)")
    if t.run_path and not instrument:
        launcher_args.append("--run-path")  # bare: torchrun runs it its own way
    elif t.run_path:  # torchrun would run_path the bootstrap's module as a file
        said.append(
            "--run-path: each rank runs the script as __main__ through mgpu-tui's bootstrap, "
            "as run_path would"
        )
    endpoint = t.rdzv_endpoint
    if t.nnodes > 1 and not endpoint and t.master_port:
        endpoint = f"{t.master_addr}:{t.master_port}"
        said.append(
            f"the nodes meet at {endpoint} through c10d (torchrun's static rendezvous, mgpu-tui's way)"
        )
    if t.nnodes == 1 and not t.standalone and not t.master_port:
        said.append("one node: a free port for the rendezvous (torchrun alone would take 29500)")
    join_timeout = _join_timeout(t.rdzv_conf, args.join_timeout)
    job, nodes, from_slurm_said = _nodes_from_slurm(t, endpoint)
    if from_slurm_said:
        said.append(from_slurm_said)
    filter_ranks = t.local_ranks_filter
    if filter_ranks:
        try:
            parse_ranks_filter(filter_ranks)  # said under torchrun's own name for it
        except ValueError:
            raise UsageError(
                f"--local-ranks-filter: give rank numbers separated by commas, got {filter_ranks!r}."
            ) from None
    if filter_ranks and not args.quiet:
        args.ranks_filter = filter_ranks
    program = t.program
    spec = LaunchSpec(
        mode="script",
        script=None if t.module else program,
        module=program if t.module else None,
        nproc=nodes.nproc,
        nnodes=nodes.nnodes,
        node_rank=nodes.node_rank,
        rdzv_endpoint=nodes.rdzv_endpoint
        if nodes.nnodes > 1 or t.rdzv_backend == "c10d" and nodes.rdzv_endpoint
        else None,
        rdzv_id=nodes.rdzv_id,
        join_timeout=join_timeout,
        max_restarts=t.max_restarts,
        master_port=t.master_port if nodes.nnodes == 1 else None,
        slurm=job,
        name=args.name,
        stall_timeout=args.stall_timeout,
        on_stall=args.on_stall,
        sample_interval=args.sample_interval,
        nice=launch_nice(args),
        run_root=Path(args.run_dir),
        instrument=instrument,
        demo_args=tuple(t.args),
        launcher_args=tuple(launcher_args),
        # torchrun's own wait between its signal to the ranks and SIGKILL, never cut short: mgpu-tui
        # kills what is left only once torchrun has had that long and a margin to end on its own.
        stop_grace=t.shutdown_timeout + TORCHRUN_END_S,
    )
    return follow(spec, args, said=tuple(said), as_bare=True)
