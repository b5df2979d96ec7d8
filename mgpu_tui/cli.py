"""The ``mgpu-tui`` command line: parse, dispatch, and turn every error into a sentence.

This module imports only the standard library at start-up, so ``--help`` is
instant; each command imports what it needs when it runs. Nothing here, or
anywhere in the app process, imports torch.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from mgpu_tui.console import plain, plain_output
from mgpu_tui.engine.machine.open_files import raise_open_files_limit
from mgpu_tui.errors import ExitCode, UsageError, exit_code_for
from mgpu_tui.parser import build_check_parser, build_parser

# Each command's function, imported when it runs (``--help`` loads none of them).
COMMANDS = {
    "run": ("mgpu_tui.commands.run", "run_command"),
    "slurm": ("mgpu_tui.commands.launchers.slurm", "slurm_command"),
    "compare": ("mgpu_tui.commands.compare", "compare_command"),
    "scale": ("mgpu_tui.commands.compare", "scale_command"),
    "runs": ("mgpu_tui.commands.runs", "runs_command"),
    "open": ("mgpu_tui.commands.runs", "open_command"),
    "nccl": ("mgpu_tui.commands.nccl", "nccl_command"),
    "plan": ("mgpu_tui.commands.plan", "plan_command"),
    "topo": ("mgpu_tui.commands.topo", "topo_command"),
    "list": ("mgpu_tui.commands.listing", "list_command"),
}
TAKE_DEMO_ARGS = ("run", "slurm")  # the commands that take arguments after --


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
            from mgpu_tui.commands.launchers.torchrun import torchrun_command

            return torchrun_command(argv)
        from mgpu_tui.commands.launchers.exec import exec_command

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
        if demo_args and args.command not in TAKE_DEMO_ARGS:
            raise UsageError("arguments after -- are only for `mgpu-tui run` and `mgpu-tui slurm`.")
        module, name = COMMANDS[args.command]
        command = getattr(importlib.import_module(module), name)
        return command(args, demo_args) if args.command in TAKE_DEMO_ARGS else command(args)
    except (Exception, KeyboardInterrupt) as exc:
        return _report(exc)
