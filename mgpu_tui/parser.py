"""The ``mgpu-tui`` command line's grammar: every command's arguments (cli.py dispatches them).

A launch flag is declared once, in engine/launch/options.py (its type, bounds, default, help, and
the mode it belongs to); this module says which command takes which, and adds each command's own.
Only the standard library and the light declarations load here: ``--help`` stays instant.
"""

from __future__ import annotations

import argparse
from typing import Any

from mgpu_tui import __version__
from mgpu_tui import parser_inspect as inspect
from mgpu_tui.arguments import (
    MAX_RANKS,
    Parser,
    whole_number,
    whole_numbers,
)
from mgpu_tui.commands.workload import add_model_arguments
from mgpu_tui.engine.launch import options
from mgpu_tui.engine.planning.defaults import DEFAULTS as D
from mgpu_tui.engine.planning.defaults import LR_RULES

METRICS_OPTIONS = ("metrics_port", "metrics_address", "metrics_linger")


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
    options.add(command, *METRICS_OPTIONS)
    return output


def build_torchrun_parser() -> Parser:
    """`mgpu-tui torchrun`'s own options: torchrun's are read by torchrun's parser
    (commands/launchers/torchrun.py)."""
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
        "130 interrupted; exec and torchrun: the job's own.",
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
    for add_command in (
        _run,
        _compare,
        _scale,
        _launch_lines,
        inspect.add_topo,
        inspect.add_runs,
        inspect.add_open,
        inspect.add_nccl,
        inspect.add_plan,
        inspect.add_slurm,
        inspect.add_list,
    ):
        add_command(commands)
    return parser


def _run(commands: Any) -> None:
    """`run`: a mode or the user's own script, headless."""
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
    options.add(modes, "schedule", "manual", "reshard_after_forward")


def _add_shared(command: argparse.ArgumentParser, batch_help: str | None = None) -> None:
    """What compare and scale share: the runs' steps, batch, device, model, and the report."""
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


def _compare(commands: Any) -> None:
    """`compare`: several modes, one table."""
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
    _add_shared(comparing)


def _scale(commands: Any) -> None:
    """`scale`: one mode over rank counts or batch sizes."""
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
    _add_shared(
        scaling,
        batch_help=f"the global batch (default {D.batch_size}); with --weak, the batch per "
        "rank; several (32,64,128) sweep the batch at one --nproc",
    )


def _launch_lines(commands: Any) -> None:
    """`torchrun` and `exec`: launch lines read whole (their commands parse them)."""
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
