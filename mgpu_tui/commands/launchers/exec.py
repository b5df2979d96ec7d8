"""``mgpu-tui exec [OPTIONS] -- COMMAND [ARG...]``: any command line, run as given, every rank followed.

The command runs as the user typed it (``python train.py``, ``python -m pkg.train``, ``accelerate
launch ...``, ``deepspeed ...``, a shell script that ends in one of these), never inside a torchrun
worker, with none of a torchrun worker's environment. Its launcher, whatever it is, starts the ranks;
every Python process of its tree runs mgpu-tui's sitecustomize (engine/rank/sitewatch/), and those
that join a process group or step an optimizer become the job's ranks (engine/rank/watch/process_watch.py):
the world size is learned from them. The rest is what `mgpu-tui torchrun` shows: per-rank steps,
samples/s, loss, memory, stalls from evidence, the root cause, the run folder.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil

from mgpu_tui.arguments import Parser
from mgpu_tui.commands.run import follow, launch_nice
from mgpu_tui.engine.launch import options
from mgpu_tui.engine.launch.spec import LaunchSpec
from mgpu_tui.errors import UsageError
from mgpu_tui.parser import add_watch_options

USAGE = "mgpu-tui exec [OPTIONS] -- COMMAND [ARG...]"


def build_exec_parser() -> Parser:
    parser = Parser(
        prog="mgpu-tui exec",
        usage=USAGE,
        description="Run any command line as given and follow every rank its launcher starts: "
        "mp.spawn, Lightning, accelerate launch, DeepSpeed-style launchers, one-process jobs. "
        "Example: mgpu-tui exec -- python train.py --epochs 3",
    )
    add_watch_options(parser)
    options.add(parser, "stop_grace")
    parser.add_argument(
        "--no-instrument",
        action="store_true",
        help="run the command bare: its output, processes and exit status only (no rank is followed)",
    )
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command line, after --")
    return parser


def read_exec_line(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """mgpu-tui's options and the command (after ``--``, or from its first word that is not one of
    ours). UsageError, one sentence, for a missing or unknown command."""
    if "--" in argv:
        at = argv.index("--")
        args = build_exec_parser().parse_args(argv[:at])
        if args.command:
            raise UsageError(f"{args.command[0]!r} stands before --: put mgpu-tui's options first ({USAGE}).")
        command = argv[at + 1 :]
    else:
        args = build_exec_parser().parse_args(argv)
        command = list(args.command)
    if not command:
        raise UsageError(f"give the command to run: {USAGE} (mgpu-tui exec -- python train.py).")
    program = command[0]
    if os.sep in program:
        if not (os.path.isfile(program) and os.access(program, os.X_OK)):
            raise UsageError(f"{program}: no such executable file.")
    elif shutil.which(program) is None:
        raise UsageError(f"{program}: command not found.")
    if (script := missing_script(command)) is not None:
        raise UsageError(f"{script}: no such file, so {os.path.basename(program)} cannot run it.")
    return args, command


_PYTHON = re.compile(r"python(\d+(\.\d+)?)?")
_PYTHON_VALUED = ("-W", "-X", "--check-hash-based-pycs")  # python's options that take the next word


def missing_script(command: list[str]) -> str | None:
    """The script of a ``python [OPTIONS] SCRIPT ...`` line when there is no such file (said before
    anything starts, as python itself would say it after); None for any other command line."""
    if not _PYTHON.fullmatch(os.path.basename(command[0])):
        return None
    words = iter(command[1:])
    for word in words:
        if word in _PYTHON_VALUED:
            next(words, None)
        elif word == "-" or word.startswith(("-c", "-m")) or word == "--":
            return None  # stdin, a command or a module: no script to look for
        elif not word.startswith("-"):
            return None if os.path.exists(word) else word
    return None


def what_it_starts(command: list[str]) -> str | None:
    """A line about a launch line that does not do what it seems to, or None."""
    words = [os.path.basename(command[0]), *command[1:]]
    if words[:2] == ["accelerate", "launch"] and "--cpu" in words and "--num_processes" in words:
        at = words.index("--num_processes")
        count = words[at + 1] if at + 1 < len(words) else ""
        if count.isdigit() and int(count) > 1:
            return (
                f"accelerate launch --cpu starts one process, whatever --num_processes says ({count}): "
                "for several CPU ranks, ACCELERATE_USE_CPU=1 with --multi_gpu --num_processes "
                f"{count} (docs/your-script.md)"
            )
    return None


def exec_command(argv: list[str]) -> int:
    args, command = read_exec_line(argv)
    said = [line for line in (what_it_starts(command),) if line]
    spec = LaunchSpec(
        mode="exec",
        command=tuple(command),
        name=args.name,
        stall_timeout=args.stall_timeout,
        on_stall=args.on_stall,
        sample_interval=args.sample_interval,
        nice=launch_nice(args),
        run_root=args.run_dir,
        instrument=not args.no_instrument,
        join_timeout=args.join_timeout,
        stop_grace=args.stop_grace,
    )
    return follow(spec, args, said=tuple(said), as_bare=True)
