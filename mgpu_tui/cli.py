"""The ``mgpu-tui`` command line: parse, dispatch, and turn every error into a sentence.

This module imports only the standard library at start-up, so ``--help`` is
instant; each command imports what it needs when it runs. Nothing here, or
anywhere in the app process, imports torch.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from mgpu_tui import __version__
from mgpu_tui.arguments import (
    MAX_BATCH,
    MAX_MICRO,
    MAX_NODES,
    MAX_RANKS,
    Parser,
    positive_float,
    whole_number,
    whole_numbers,
)
from mgpu_tui.commands.workload import add_model_arguments
from mgpu_tui.console import plain, plain_output
from mgpu_tui.engine.launch import options
from mgpu_tui.engine.machine.open_files import raise_open_files_limit
from mgpu_tui.engine.planning.defaults import DEFAULTS as D
from mgpu_tui.engine.planning.defaults import LR_RULES
from mgpu_tui.errors import ExitCode, UsageError, exit_code_for


def add_watch_options(command: argparse.ArgumentParser) -> argparse._MutuallyExclusiveGroup:
    """The options of how mgpu-tui follows a run (`run` and `torchrun` alike); the group of the
    console's rank output, to which `run` adds --ranks-filter."""
    options.add(command, "run_dir", "name")
    command.add_argument("--json", action="store_true", help="end with one JSON summary line on stdout")
    output = command.add_mutually_exclusive_group()
    output.add_argument("--quiet", action="store_true", help="show none of the ranks' own output")
    command.add_argument(
        "--tui", action="store_true", help="open the app on the Run view with this run started"
    )
    options.add(command, "stall_timeout", "on_stall", "sample_interval", "nice", "join_timeout")
    return output


def build_torchrun_parser() -> Parser:
    """`mgpu-tui torchrun`'s own options: torchrun's are read by torchrun's parser (commands/torchrun.py)."""
    parser = Parser(prog="mgpu-tui torchrun", add_help=False)
    add_watch_options(parser)
    parser.add_argument(
        "--no-instrument",
        action="store_true",
        help="run the script bare, as torchrun alone would (no steps, loss or memory from the bootstrap)",
    )
    return parser


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="mgpu-tui",
        description="See and compare every PyTorch multi-GPU strategy on this machine. "
        "Without a command, opens the terminal app.",
        epilog="Exit codes: 0 ok, 1 a run or check failed, 2 usage error, 3 environment unusable, "
        "130 interrupted.",
    )
    parser.add_argument("--version", action="version", version=f"mgpu-tui {__version__}")
    parser.add_argument(
        "--check", action="store_true", help="run the diagnostic suite headless (see mgpu-tui --check --help)"
    )
    parser.add_argument(
        "--run-dir",
        default=str(options.RUN_ROOT),
        metavar="DIR",
        dest="app_run_dir",
        help="with no COMMAND: where the app's runs go and where its Runs view looks (default ./runs)",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)

    run = commands.add_parser(
        "run",
        help="run a parallelism mode headless, with live progress and a summary",
        description="Run a parallelism mode as real processes (torchrun for multi-process modes) "
        "and summarise it. Arguments after -- go to the demo (for example -- --lr 0.1 --amp).",
    )
    run.add_argument("mode", metavar="MODE", nargs="?", help="a mode from `mgpu-tui list`")
    run.add_argument("--script", metavar="PATH", help="run your own training script (as torchrun would)")
    run.add_argument("--module", metavar="NAME", help="run your own module instead (python -m NAME)")
    options.add(run, "nproc", "steps", "batch_size", "device", "share_gpus")
    output = add_watch_options(run)
    output.add_argument(
        "--ranks-filter",
        metavar="R,R,...",
        help="show these ranks' own output on the console while it runs (like torchrun's "
        "--local-ranks-filter); your own script shows every rank's by default",
    )
    run.add_argument(
        "--no-instrument",
        action="store_true",
        help="run your script bare, as torchrun alone would: no steps, loss or memory from mgpu-tui's "
        "bootstrap (its logs, processes and root cause stay)",
    )
    run.add_argument(
        "--verify",
        action="store_true",
        help="afterwards, compare the trained parameters with the single-device baseline",
    )
    training = run.add_argument_group("training (the same for every mode)")
    options.add(training, "amp", "amp_dtype", "accum", "lr", "warmup_steps", "seed", "width", "depth")
    add_model_arguments(training)
    options.add(run, "force")
    nodes = run.add_argument_group("torchrun options (torchrun's names and meanings)")
    options.add(nodes, "nnodes", "node_rank", "rdzv_endpoint", "rdzv_id", "max_restarts", "master_port")
    modes = run.add_argument_group("mode options")
    options.add(modes, "stages", "microbatches")
    modes.add_argument("--schedule", choices=("gpipe", "1f1b"), help="pipeline schedule (default gpipe)")
    modes.add_argument(
        "--manual",
        action="store_true",
        help="dp: show replicate/scatter/parallel_apply/gather by hand (CUDA)",
    )
    modes.add_argument(
        "--reshard-after-forward",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="fsdp: free gathered parameters after forward (default on)",
    )

    def add_shared(command: argparse.ArgumentParser, batch_help: str | None = None) -> None:
        options.add(command, "steps", help=f"steps per run (default {D.steps})")
        if batch_help is None:
            options.add(
                command,
                "batch_size",
                help=f"the global batch, the same for every run (default {D.batch_size})",
            )
        else:  # scale sweeps it
            options.add(
                command,
                "batch_size",
                type=whole_numbers,
                default=[D.batch_size],
                metavar="B[,B,...]",
                help=batch_help,
            )
        options.add(command, "device", "amp", "amp_dtype", "share_gpus", "width", "depth")
        add_model_arguments(command)
        command.add_argument(
            "--out",
            metavar="FILE",
            help="write a report: .json, .md or .csv (and a .png beside it when matplotlib is installed)",
        )
        command.add_argument("--json", action="store_true", help="print the report as one JSON line")
        options.add(command, "run_dir", help="where each run's folder goes (default ./runs)")

    comparing = commands.add_parser(
        "compare",
        help="run several modes one after another and compare them in one table",
        description="Run each mode on the same model, data, seed and global batch, then compare step time, "
        "throughput, FLOP/s, memory and loss. A mode that fails is a row with its cause; "
        "the others still run.",
    )
    comparing.add_argument("modes", metavar="MODE", nargs="*", help="modes from `mgpu-tui list`")
    comparing.add_argument(
        "--runs",
        metavar="DIR",
        nargs="+",
        help="compare finished runs from their folders instead, running nothing",
    )
    options.add(
        comparing,
        "nproc",
        help=f"ranks for the multi-process modes (default: one per GPU, or {D.cpu_ranks} on the CPU)",
    )
    comparing.add_argument(
        "--parallel",
        action="store_true",
        help="run the modes at the same time, each on its own GPUs (not a fair race)",
    )
    add_shared(comparing)

    scaling = commands.add_parser(
        "scale",
        help="run one mode over several rank counts or batch sizes: speedup, efficiency, loss",
        description="Run MODE at each rank count (strong scaling: the global batch stays; --weak: the batch "
        "per rank stays) or, for one rank count, at each --batch-size. Each point reports throughput, "
        "speedup, efficiency = throughput(N) / (N x throughput(1)), the global batch, the learning rate "
        "(which follows the batch by --lr-rule) and the loss after the same number of samples.",
    )
    scaling.add_argument("mode", metavar="MODE", help="a multi-process mode (ddp, fsdp, ...)")
    scaling.add_argument(
        "--nproc",
        type=whole_numbers,
        required=True,
        metavar="N[,N,...]",
        help="rank counts, for example 1,2,4,8 (one count for a --batch-size sweep)",
    )
    scaling.add_argument(
        "--weak",
        action="store_true",
        help="weak scaling: --batch-size is per rank, so the global batch grows with the ranks",
    )
    options.add(
        scaling, "lr", default=D.lr, help=f"SGD's learning rate at the first point's batch (default {D.lr})"
    )
    scaling.add_argument(
        "--lr-rule",
        choices=LR_RULES,
        default="linear",
        help="how the learning rate follows the global batch: linear (k x the batch, k x "
        "the lr; Goyal et al. 2017), sqrt, or none (default linear)",
    )
    options.add(
        scaling,
        "warmup_steps",
        default=None,
        help="ramp the learning rate up over these first steps (default: none for strong "
        "scaling, where the batch stays; else a fifth of --steps)",
    )
    add_shared(
        scaling,
        batch_help=f"the global batch (default {D.batch_size}); with --weak, the batch per "
        "rank; several (32,64,128) sweep the batch at one --nproc",
    )

    commands.add_parser(
        "torchrun",
        help="torchrun's own command line, watched: mgpu-tui torchrun --nproc-per-node 2 train.py ...",
        description="Exactly torchrun's arguments (read by torchrun's own parser, PET_* variables too), "
        "and the job runs as `mgpu-tui run --script` runs it: your script unchanged, every rank watched. "
        "mgpu-tui's own options (--json, --run-dir, --no-instrument, ...) may stand before the script; "
        "`mgpu-tui torchrun --help` lists both.",
        add_help=False,
    )

    commands.add_parser(
        "exec",
        help="any command line, every rank followed: mgpu-tui exec -- python train.py (mp.spawn, "
        "Lightning, accelerate launch, deepspeed ...)",
        description="The command runs as given; every Python process that joins a process group or "
        "steps an optimizer is a rank. `mgpu-tui exec --help` lists its options.",
        add_help=False,
    )

    topo = commands.add_parser(
        "topo", help="the GPU interconnect (NVLink, PCIe, NUMA), like nvidia-smi topo -m, and its reading"
    )
    topo.add_argument("--json", action="store_true", help='print JSON: {"gpus": [...], "matrix": [...]}')
    topo.add_argument("--from-file", metavar="FILE", help="read saved `nvidia-smi topo -m` output instead")

    history = commands.add_parser(
        "runs",
        help="the past runs of a folder, newest first",
        description="The past runs under --run-dir, newest first: when, what, "
        "ranks, status, duration, samples/s, final loss, and why a run failed. "
        "Folders that are not runs, or half-written ones, are listed as broken.",
    )
    options.add(history, "run_dir", help="the folder of runs (default ./runs)")
    history.add_argument("--json", action="store_true", help='print JSON: {"runs": [...]}')
    history.add_argument(
        "--delete-older-than",
        type=positive_float,
        metavar="DAYS",
        help="delete the runs started more than DAYS ago (asks first; never a run still going, nor a "
        "folder that is not a run)",
    )
    history.add_argument("--yes", action="store_true", help="with --delete-older-than: do not ask")

    opening = commands.add_parser(
        "open",
        help="the app on one run: replayed if it ended, followed if not",
        description="Open the app on a run folder. A finished run is replayed from "
        "its files (ranks, charts, logs, root cause, the machine's telemetry); a "
        "run still going (started in another terminal, or by a scheduler) is "
        "followed live, and quitting leaves it running.",
    )
    opening.add_argument(
        "run",
        metavar="RUN",
        help="a run folder, `latest` (the newest under --run-dir), or a Slurm job id (its newest step's run)",
    )
    options.add(
        opening, "run_dir", help="the folder of runs, for `latest` and the Runs view (default ./runs)"
    )

    reading = commands.add_parser(
        "nccl",
        help="read NCCL's own log (NCCL_DEBUG=INFO): transports, channels, warnings, what they mean",
        description="Read NCCL_DEBUG=INFO logs (one or several files: one per rank or host is fine; "
        "launcher prefixes such as Ray's or MPI's are skipped): which transport NCCL chose between each "
        "pair of ranks, its channels and rings, its version, hosts, warnings and errors, each explained.",
    )
    reading.add_argument("logs", metavar="LOG", nargs="+", help="a log file with NCCL's lines")
    reading.add_argument(
        "--topo",
        metavar="FILE",
        help="saved `nvidia-smi topo -m` of the host: say where NCCL's choice disagrees",
    )
    reading.add_argument("--json", action="store_true", help="print JSON")

    planning = commands.add_parser(
        "plan",
        help="will a model fit, and under which mode: each GPU's memory, part by part, per mode",
        description="Predict, for every mode, the memory of each GPU to train a transformer: parameters, "
        "gradients, optimizer state, activations (an estimate: docs/compare.md) and buffers, and whether "
        "it fits the GPU (read through NVML, else --gpu-mem). Nothing runs: models far larger than this "
        "machine can be planned.",
    )
    add_model_arguments(planning, default="gpt-125m")
    planning.add_argument(
        "--gpus",
        type=whole_number(1, MAX_RANKS),
        metavar="N",
        help="GPUs to plan for (default: this machine's)",
    )
    planning.add_argument(
        "--gpu-mem", type=positive_float, metavar="GiB", help="each GPU's memory (default: read through NVML)"
    )
    planning.add_argument(
        "--optimizer",
        choices=("sgd", "adam"),
        default="sgd",
        help="sgd (with momentum, as the modes train; default) or adam",
    )
    planning.add_argument("--amp", action="store_true", help="mixed precision: 16-bit activations")
    planning.add_argument(
        "--batch-size",
        type=whole_number(1, MAX_BATCH),
        metavar="B",
        help="the global batch in sequences (default: one a GPU)",
    )
    planning.add_argument(
        "--microbatches",
        type=whole_number(1, MAX_MICRO),
        default=D.microbatches,
        metavar="M",
        help=f"pipeline micro-batches (default {D.microbatches})",
    )
    planning.add_argument("--schedule", choices=("gpipe", "1f1b"), default="gpipe", help="pipeline schedule")
    planning.add_argument("--json", action="store_true", help="print JSON")

    batch = commands.add_parser(
        "slurm",
        help="print an sbatch script that runs a mode or your script on several nodes",
        description="Print a complete sbatch script: one `mgpu-tui run` per node, which reads the "
        "nodes, its rank and the rendezvous from Slurm. Arguments after -- end each node's "
        "`mgpu-tui run` line as given: its options, and after a second -- the script's own "
        "(for example -- --steps 1000, or -- -- --epochs 3).",
    )
    batch.add_argument("mode", metavar="MODE", nargs="?", help="a mode from `mgpu-tui list`")
    batch.add_argument("--script", metavar="FILE", help="your own torchrun script instead of a mode")
    batch.add_argument("--nodes", type=whole_number(1, MAX_NODES), default=2, help="nodes (default 2)")
    batch.add_argument(
        "--gpus-per-node", type=whole_number(1, MAX_RANKS), metavar="G", help="GPUs a node (--gpus-per-node)"
    )
    batch.add_argument(
        "--nproc",
        type=whole_number(1, MAX_RANKS),
        help="ranks a node (default: its GPUs, as Slurm gives them)",
    )
    batch.add_argument("--time", default="01:00:00", metavar="HH:MM:SS", help="time limit (default 01:00:00)")
    batch.add_argument("--partition", metavar="NAME", help="Slurm partition (default: the cluster's)")
    batch.add_argument("--account", metavar="NAME", help="Slurm account to charge")
    batch.add_argument("--job-name", metavar="NAME", help="the job's name (default: the mode or script)")
    batch.add_argument(
        "--output",
        default="mgpu-tui-%j.out",
        metavar="FILE",
        help="the job's output (default mgpu-tui-%%j.out)",
    )
    batch.add_argument(
        "--run-dir",
        metavar="DIR",
        help="run folder on a filesystem every node mounts (default: the submit directory's runs/)",
    )

    listing = commands.add_parser("list", help="the modes, and whether each can run here")
    listing.add_argument("--json", action="store_true", help='print JSON: {"modes": [...]}')
    return parser


def build_check_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="mgpu-tui --check",
        description="Diagnose this machine for multi-GPU PyTorch, headless: the environment, NVML, "
        "topology, collective correctness and bandwidth, and a smoke run of every mode.",
        epilog="Levels: 1 the environment, no rank started (seconds); 2 (default) adds collectives, "
        "all_reduce bandwidth and a smoke run of every mode in one launch; 3 adds --verify for every mode, "
        "an all_reduce size sweep, a ddp scaling run and a GPU copy matrix. Exit codes: 0 passed "
        "(skips and warnings allowed), 1 a check failed, 2 usage, 3 torch unusable, 130 interrupted.",
    )
    parser.add_argument("--check", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--level", type=whole_number(0), default=2, help="1, 2 (default) or 3")
    parser.add_argument("--json", metavar="PATH", help="write the report as JSON (- for stdout)")
    parser.add_argument("--junit", metavar="PATH", help="write JUnit XML, one testcase per check")
    parser.add_argument(
        "--require-gpus",
        type=whole_number(0, MAX_RANKS),
        default=0,
        metavar="N",
        help="fail, not skip, when fewer than N GPUs are usable",
    )
    options.add(parser, "nproc", help=f"ranks (default: one per GPU, or {D.cpu_ranks} on the CPU)")
    options.add(parser, "device", help="auto: CUDA when there are GPUs")
    parser.add_argument("--modes", metavar="M,M,...", help="smoke-run (and verify) only these modes")
    options.add(
        parser, "share_gpus", help="let --nproc exceed the GPUs: ranks share them round-robin, over gloo"
    )
    add_model_arguments(parser)  # what the smoke and verify runs train
    options.add(parser, "run_dir", help="where the ranks' logs go (default ./runs)")
    return parser


def _split_demo_args(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    argv = list(argv)
    if "--" in argv:
        at = argv.index("--")
        return argv[:at], argv[at + 1 :]
    return argv, []


def _dispatch_whole_line(command: str, argv: list[str]) -> int:
    """torchrun and exec read their lines whole: the program's own arguments may hold "--"."""
    try:
        if command == "torchrun":
            from mgpu_tui.commands.torchrun import torchrun_command

            return torchrun_command(argv)
        from mgpu_tui.commands.exec import exec_command

        return exec_command(argv)
    except (Exception, KeyboardInterrupt) as exc:
        return _report(exc)


def _report(exc: BaseException) -> int:
    """An error as its sentence on stderr and its exit code (a bug, with no code, is raised)."""
    code = exit_code_for(exc)
    if code is None:
        raise exc  # a bug: its traceback is the useful report
    if isinstance(exc, BrokenPipeError):
        # `mgpu-tui plan | head`: nothing more to say to a reader that is gone, and the output that is
        # still buffered goes nowhere (Python flushes it at exit, which would fail again).
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return code
    if code is not ExitCode.INTERRUPTED:
        print(f"mgpu-tui: {plain(str(exc))}", file=sys.stderr)  # it may quote a path or a rank
    return code


def main(argv: Sequence[str] | None = None) -> int:
    """The command line; whatever any command prints passes the one sink (console.plain_output)."""
    raise_open_files_limit()  # a job of many ranks: an event file each, open while it is followed
    with plain_output():
        return _main(sys.argv[1:] if argv is None else list(argv))


def _main(argv: list[str]) -> int:
    if argv[:1] in (["torchrun"], ["exec"]):  # a launch line, whole: its program's arguments may hold "--"
        return _dispatch_whole_line(argv[0], argv[1:])
    ours, demo_args = _split_demo_args(argv)
    parser = build_parser()
    try:
        if "--check" in ours:
            if demo_args:
                raise UsageError("arguments after -- are only for `mgpu-tui run`.")
            from mgpu_tui.commands.check import check_command

            return check_command(build_check_parser().parse_args(ours))
        args = parser.parse_args(ours)
        if args.command is None:
            from mgpu_tui.commands.tui import tui_command

            return tui_command(None, run_root=Path(args.app_run_dir))
        if demo_args and args.command not in ("run", "slurm"):
            raise UsageError("arguments after -- are only for `mgpu-tui run` and `mgpu-tui slurm`.")
        if args.command == "run":
            from mgpu_tui.commands.run import run_command

            return run_command(args, demo_args)
        if args.command == "slurm":
            from mgpu_tui.commands.slurm import slurm_command

            return slurm_command(args, demo_args)
        if args.command in ("compare", "scale"):
            from mgpu_tui.commands.compare import compare_command, scale_command

            return (compare_command if args.command == "compare" else scale_command)(args)
        if args.command == "runs":
            from mgpu_tui.commands.runs import runs_command

            return runs_command(args)
        if args.command == "nccl":
            from mgpu_tui.commands.nccl import nccl_command

            return nccl_command(args)
        if args.command == "open":
            from mgpu_tui.commands.runs import open_command

            return open_command(args)
        if args.command == "plan":
            from mgpu_tui.commands.plan import plan_command

            return plan_command(args)
        if args.command == "topo":
            from mgpu_tui.commands.topo import topo_command

            return topo_command(args)
        from mgpu_tui.commands.listing import list_command

        return list_command(args)
    except (Exception, KeyboardInterrupt) as exc:
        return _report(exc)
