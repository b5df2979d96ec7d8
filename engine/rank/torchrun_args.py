"""torchrun's command line read by torchrun's own parser, for ``mgpu-tui torchrun``.

The command line never imports torch, so this runs in a child process::

    python -m mgpu_tui.engine.rank.torchrun_args OURS_JSON ARG...

``OURS_JSON`` lists mgpu-tui's own options (``[["--json", 0, "..."], ["--run-dir", 1, "..."]]``:
each with how many values it takes, and its help); they may stand among torchrun's, before the
script. The parser is the one ``torchrun`` itself builds
(``torch.distributed.run.get_args_parser``), so every flag, its spelling (``--nproc-per-node`` and
``--nproc_per_node``) and its ``PET_*`` environment variable mean what they mean to torchrun. One
JSON object is printed: ``{"torchrun": {...}, "ours": [...]}``, or ``{"error": "..."}`` (exit 2);
``--help`` prints torchrun's help and mgpu-tui's.

Everything mgpu-tui models is read out (the program, ranks, nodes, rendezvous, restarts); the
settings it passes on as they are (``--monitor-interval``, ``--start-method``, ``--role``, ...)
come back as ``passthrough`` arguments; torchrun's output options (``--log-dir``,
``--redirects``, ``--tee``) are mgpu-tui's to set (every rank's output is kept in the run folder)
and come back in ``ignored``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

# Read out into mgpu-tui's launch spec, or set by mgpu-tui itself: never passed on as given.
MODELLED = {
    "nnodes", "nproc_per_node", "rdzv_backend", "rdzv_endpoint", "rdzv_id", "rdzv_conf", "standalone",
    "max_restarts", "module", "no_python", "node_rank", "master_addr", "master_port", "local_addr",
    "local_ranks_filter", "training_script", "training_script_args", "help", "run_path",
}  # fmt: skip
IGNORED = {
    "log_dir",
    "redirects",
    "tee",
    "logs_specs",
    "duplicate_stdout_filters",
    "duplicate_stderr_filters",
}


class _Refused(Exception):
    pass


def _parser(ours: list[tuple[str, int, str]]) -> argparse.ArgumentParser:
    from torch.distributed.run import get_args_parser

    parser = get_args_parser()
    parser.prog = "mgpu-tui torchrun"

    def refuse(message: str):
        raise _Refused(message)

    # One sentence back to mgpu-tui, never argparse's exit (torchrun's parser is a plain ArgumentParser).
    parser.error = refuse  # type: ignore[method-assign]
    group = parser.add_argument_group("mgpu-tui's own options (before the script; see mgpu-tui run --help)")
    for option, values, help_text in ours:
        if values:
            metavar = option.lstrip("-").upper().replace("-", "_")
            group.add_argument(option, dest=f"mgpu:{option}", default=None, metavar=metavar, help=help_text)
        else:
            group.add_argument(option, dest=f"mgpu:{option}", action="store_true", help=help_text)
    return parser


def _nnodes(text: str) -> int:
    low, _, high = str(text).partition(":")
    try:
        low_n, high_n = int(low), int(high or low)
    except ValueError:
        raise _Refused(f"--nnodes must be a number or MIN:MAX, got {text!r}.") from None
    if low_n != high_n:
        raise _Refused(
            f"--nnodes {text}: an elastic range is not supported; give one count (--nnodes {high_n})."
        )
    return low_n


def _long(action: argparse.Action) -> str:
    return next((o for o in action.option_strings if o.startswith("--")), action.option_strings[0])


def _passthrough(parser: argparse.ArgumentParser, args: argparse.Namespace) -> list[str]:
    """torchrun's own settings that mgpu-tui does not model, given a value other than the default."""
    out: list[str] = []
    for action in parser._actions:
        if action.dest in MODELLED or action.dest in IGNORED or action.dest.startswith("mgpu:"):
            continue
        value = getattr(args, action.dest, None)
        if value == action.default or not action.option_strings:
            continue
        if action.nargs == 0:
            out.append(_long(action))
        elif value is not None:
            out += [_long(action), str(value)]
    return out


def _shutdown_timeout(args: argparse.Namespace) -> float:
    """torchrun's wait from its signal to its ranks to their SIGKILL, as torchrun reads it (its
    flag, else TORCH_ELASTIC_SHUTDOWN_TIMEOUT, else 30 s: torch.distributed.launcher.api)."""
    given = getattr(args, "shutdown_timeout", None)
    try:
        value = float(given if given is not None else os.environ.get("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "30"))
    except ValueError:
        raise _Refused(f"--shutdown-timeout must be a number of seconds, got {given!r}.") from None
    if not 0 <= value <= 1e6:
        raise _Refused(f"--shutdown-timeout must be from 0 to 1000000 seconds, got {value:g}.")
    return value


def read(argv: list[str], ours: list[tuple[str, int, str]]) -> dict[str, Any]:
    parser = _parser(ours)
    if not argv or argv[0] in ("-h", "--help"):
        parser.print_help()
        raise SystemExit(0)
    args = parser.parse_args(argv)
    from torch.distributed.run import determine_local_world_size

    try:
        nproc = determine_local_world_size(str(args.nproc_per_node))
    except ValueError as exc:
        raise _Refused(f"--nproc-per-node {args.nproc_per_node}: {exc}") from None
    given_port = args.master_port is not None and (
        any(a.startswith(("--master-port", "--master_port")) for a in argv) or "PET_MASTER_PORT" in os.environ
    )
    chosen: list[str] = []
    for option, values, _ in ours:
        value = getattr(args, f"mgpu:{option}")
        if values and value is not None:
            chosen += [option, value]
        elif not values and value:
            chosen.append(option)
    ignored = [_long(a) for a in parser._actions if a.dest in IGNORED
               and getattr(args, a.dest, None) not in (None, a.default, "", [])]  # fmt: skip
    return {
        "torchrun": {
            "program": args.training_script,
            "args": list(args.training_script_args),
            "module": bool(args.module),
            "no_python": bool(args.no_python),
            "run_path": bool(getattr(args, "run_path", False)),
            "nproc": nproc,
            "nnodes": _nnodes(args.nnodes),
            "node_rank": int(args.node_rank),
            "rdzv_backend": args.rdzv_backend,
            "rdzv_endpoint": args.rdzv_endpoint or None,
            "rdzv_id": None if args.rdzv_id in (None, "", "none") else args.rdzv_id,
            "rdzv_conf": args.rdzv_conf or "",
            "standalone": bool(args.standalone),
            "max_restarts": int(args.max_restarts),
            "master_addr": args.master_addr,
            "master_port": int(args.master_port) if given_port else None,
            "local_ranks_filter": args.local_ranks_filter or None,
            "shutdown_timeout": _shutdown_timeout(args),
        },
        "ours": chosen,
        "passthrough": _passthrough(parser, args),
        "ignored": ignored,
    }


def main() -> None:
    try:
        ours = [(str(o), int(n), str(h)) for o, n, h in json.loads(sys.argv[1])]
        print(json.dumps(read(sys.argv[2:], ours)))
    except _Refused as exc:
        print(json.dumps({"error": str(exc)}))
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
