"""The launch options, declared once: each flag's type and bounds, default and help.

``mgpu-tui run``, ``compare``, ``scale`` and ``--check`` add their flags from here, and so do the
demos, which the ranks run with the same flags passed on; :func:`spec_values` turns parsed
arguments into :class:`LaunchSpec` fields, so a flag and its field cannot drift apart. A command
may say a flag its own way (``compare``'s ``--steps`` is "steps per run"): ``add(parser, "steps",
help=...)``. Standard library only: ``mgpu-tui --help`` reads this.

Each type refuses bad input with one sentence (argparse then names the option): a number past
its bound means nothing on any machine, and would fail later with a traceback, or make a command
work for hours.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mgpu_tui.engine.planning.defaults import DEFAULTS as D

# Bounds at the door (issue #28). One home for each.
MAX_COUNT = (1 << 31) - 1  # any count not bounded more tightly (--nproc, --nice, a port: by their own checks)
MAX_STEPS = 10**9
MAX_BATCH = 1 << 24  # samples in a global batch
MAX_MICRO = 1 << 16  # micro-batches a step (--accum, --microbatches)
MAX_RANKS = 1 << 14  # ranks, stages, GPUs planned for: the planner shows each one
MAX_NODES = 1 << 12  # as a recorded run may claim (engine/records/history.py's MAX_NNODES)
MAX_WIDTH = 1 << 16  # the MLP's width (a GPT's shape fields: commands/workload.py)
MAX_DEPTH = 1 << 12  # the MLP's blocks
MAX_RESTARTS = 1000
MAX_FLOAT = 1e9  # seconds (31 years), GiB, a learning rate: any float flag
MAX_SEED = 2**32 - 1  # the demos derive each step's data seed from it: it must stay in 64 bits

DEVICES = ("auto", "cpu", "cuda")
AMP_DTYPES = ("fp16", "bf16")
RUN_ROOT = Path("runs")  # where run folders go unless --run-dir says otherwise


# ---- the types: each refuses bad input with one sentence ------------------------------------


def whole_number(minimum: int, maximum: int = MAX_COUNT) -> Callable[[str], int]:
    """A parser of whole numbers from ``minimum`` to ``maximum``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        if value > maximum:
            raise argparse.ArgumentTypeError(f"must be at most {maximum:,}, got {value:,}")
        return value

    return parse


def positive_float(text: str) -> float:
    """A finite number above zero and at most MAX_FLOAT: a learning rate, a timeout, GiB. (float()
    takes 'inf' and 'nan'.)"""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be more than 0, got {text}")
    if value > MAX_FLOAT:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_FLOAT:g}, got {text}")
    return value


def seconds_or_off(text: str) -> float:
    """0 (off), or a finite number of seconds of at least 0.1."""
    if text.strip() in ("0", "0.0"):
        return 0.0
    value = positive_float(text)
    if value < 0.1:
        raise argparse.ArgumentTypeError(f"must be 0 or at least 0.1 seconds, got {text}")
    return value


def address(text: str) -> str:
    """A host name or an IP address to listen on (whether it is one here, binding says)."""
    if not text or len(text) > 255 or any(c.isspace() or not c.isprintable() for c in text):
        raise argparse.ArgumentTypeError(f"must be a host name or an IP address, got {text[:80]!r}")
    return text


def run_name(text: str) -> str:
    """A job's id (--rdzv-id): a name, since it names the nodes' shared run folder, never a path."""
    from mgpu_tui.engine.protocol.rundir_make import NAME

    if not NAME.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"must be a name of letters, digits, '.', '_' and '-' (at most 64, starting with a letter "
            f"or digit), got {text[:80]!r}"
        )
    return text


def whole_numbers(text: str) -> list[int]:
    """Counts separated by commas (1,2,4,8), each from 1 to MAX_BATCH, at most 64 of them."""
    parts = [part.strip() for part in text.split(",")]
    if len(parts) > 64:
        raise argparse.ArgumentTypeError(f"must be at most 64 counts, got {len(parts)}")
    if not all(part.isdigit() and len(part) <= 10 for part in parts):
        raise argparse.ArgumentTypeError(f"must be whole numbers separated by commas, got {text!r}")
    counts = [int(part) for part in parts]
    if min(counts) < 1:
        raise argparse.ArgumentTypeError(f"each must be at least 1, got {text!r}")
    if max(counts) > MAX_BATCH:
        raise argparse.ArgumentTypeError(f"each must be at most {MAX_BATCH:,}, got {max(counts):,}")
    return counts


# ---- the options ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Option:
    """One flag: ``--name`` (its dest, and the LaunchSpec field of that name where there is one)."""

    name: str
    help: str
    type: Callable[[str], Any] | None = None
    default: Any = None
    choices: tuple[str, ...] | None = None
    switch: bool = False  # a flag that takes no value (store_true)
    metavar: str | None = None
    aliases: tuple[str, ...] = ()  # torchrun's names for it
    negatable: bool = False  # --name and --no-name (None when neither is given)
    mode: str | None = None  # the one mode whose demo takes it: `run` passes it on to that demo alone
    env: str | None = None  # the environment variable that gives it when the flag is not (a pod's)

    @property
    def flags(self) -> tuple[str, ...]:
        return (f"--{self.name.replace('_', '-')}", *self.aliases)

    def check(self, value: object, flag: str | None = None) -> Any:
        """``value`` (as another parser read it: torchrun's, for the drop-in) through this flag's
        type: the same bounds and the same sentence; ValueError("--flag: why") otherwise."""
        if self.type is None:
            return value
        try:
            return self.type(str(value))
        except argparse.ArgumentTypeError as exc:
            raise ValueError(f"{flag or self.flags[0]} {exc}") from None

    def add_to(self, parser: Any, **changes: Any) -> None:
        """Add this flag to ``parser`` (or an argument group); ``changes`` say it a command's way."""
        option = dataclasses.replace(self, **changes) if changes else self
        if option.switch:
            parser.add_argument(*option.flags, dest=option.name, action="store_true", help=option.help)
            return
        if option.negatable:
            parser.add_argument(
                *option.flags, dest=option.name, action=argparse.BooleanOptionalAction, help=option.help
            )
            return
        extra: dict[str, Any] = {"choices": option.choices} if option.choices else {}
        if option.metavar:
            extra["metavar"] = option.metavar
        parser.add_argument(
            *option.flags,
            dest=option.name,
            type=option.type,
            default=option.default,
            help=option.help,
            **extra,
        )


_CPU_RANKS = f"one per GPU, or {D.cpu_ranks} on the CPU"

OPTIONS = {
    o.name: o
    for o in (
        Option(
            "nproc",
            f"ranks to start (default: {_CPU_RANKS}; 1 for one-process modes)",
            whole_number(1),
            aliases=("--nproc-per-node",),
        ),
        Option("steps", f"training steps (default {D.steps})", whole_number(1, MAX_STEPS), D.steps),
        Option(
            "batch_size",
            f"the global batch (default {D.batch_size})",
            whole_number(1, MAX_BATCH),
            D.batch_size,
        ),
        Option(
            "device", "auto: CUDA when there are GPUs, else the CPU (gloo)", choices=DEVICES, default="auto"
        ),
        Option(
            "share_gpus",
            "let ranks share GPUs round-robin when the mode needs more than there are "
            "(they talk over gloo; timings then say nothing about a real multi-GPU box)",
            switch=True,
        ),
        Option("amp", "mixed precision: fp16 + GradScaler on CUDA, bf16 on the CPU", switch=True),
        Option("amp_dtype", "with --amp: override the autocast dtype", choices=AMP_DTYPES),
        Option("accum", "micro-batches per step", whole_number(1, MAX_MICRO), D.accum),
        Option("lr", f"learning rate (default {D.lr})", positive_float),
        Option(
            "warmup_steps",
            "ramp the learning rate up linearly over these first steps (default 0)",
            whole_number(0, MAX_STEPS),
            0,
        ),
        Option("seed", f"weights and data seed (default {D.seed})", whole_number(0, MAX_SEED)),
        Option("width", f"hidden width (default {D.width})", whole_number(1, MAX_WIDTH), D.width),
        Option("depth", f"hidden blocks (default {D.depth})", whole_number(1, MAX_DEPTH), D.depth),
        Option(
            "stages", f"mp: GPUs to spread over (default {D.stages})", whole_number(1, MAX_RANKS), D.stages
        ),
        Option(
            "microbatches", f"pipeline (default {D.microbatches})", whole_number(1, MAX_MICRO), D.microbatches
        ),
        Option("force", f"start more than {D.cpu_ranks_per_core} CPU ranks per core anyway", switch=True),
        Option(
            "nnodes", "nodes in the job (default 1; in a Slurm step: the step's)", whole_number(1, MAX_NODES)
        ),
        Option(
            "node_rank",
            "this node's rank (default 0; in a Slurm step: SLURM_NODEID)",
            whole_number(0, MAX_NODES - 1),
        ),
        Option("rdzv_endpoint", "c10d rendezvous, alike on every node", metavar="HOST:PORT"),
        Option("rdzv_id", "the job's id, the same on every node (a name)", run_name, metavar="ID"),
        Option("max_restarts", "restarts on failure", whole_number(0, MAX_RESTARTS), 0),
        Option("master_port", "one node: this port, not a free one", whole_number(1)),
        Option(
            "run_dir", "where the run's folder goes (default ./runs)", default=str(RUN_ROOT), metavar="DIR"
        ),
        # How mgpu-tui watches the run (run and torchrun alike).
        Option(
            "name",
            "a name for the run: it ends the folder's name (runs/<time>-<mode>-NAME); the listings show it",
            run_name,
            metavar="NAME",
        ),
        Option(
            "stall_timeout",
            "a rank silent this long is silent (default max(30 s, 10 x the median step)); a silent "
            "mode is stalled; your own script's silence is a stall once nothing moves (docs/your-script.md)",
            positive_float,
            metavar="S",
        ),
        Option(
            "on_stall",
            "stop the run with exit 1, or report the stall and go on (default: stop a mode; report for "
            "your own script, whose long quiet spells mgpu-tui cannot know)",
            choices=("stop", "report"),
        ),
        Option(
            "sample_interval",
            "sample the GPUs, the host and the ranks every S seconds into the run's "
            "telemetry.jsonl (default 1; 0: none)",
            seconds_or_off,
            1.0,
            metavar="S",
        ),
        # A mode's own flags, which its demo reads (`run` refuses them for another mode).
        Option("schedule", "pipeline schedule (default gpipe)", choices=("gpipe", "1f1b"), mode="pipeline"),
        Option(
            "manual",
            "dp: show replicate/scatter/parallel_apply/gather by hand (CUDA)",
            switch=True,
            mode="dp",
        ),
        Option(
            "reshard_after_forward",
            "fsdp: free gathered parameters after forward (default on)",
            negatable=True,
            mode="fsdp",
        ),
        Option(
            "nice",
            "lower the ranks' CPU priority by N, 0-19 (default 0; 10 with --tui, so the "
            "screen answers keys on a machine whose cores the ranks fill)",
            whole_number(0),
            metavar="N",
        ),
        # Prometheus metrics, served by the monitor (engine/metrics/; docs/metrics.md).
        Option(
            "metrics_port",
            "serve the run's figures for Prometheus at http://ADDRESS:PORT/metrics while it goes "
            "(default: none; $MGPU_METRICS_PORT)",
            whole_number(1, 65535),
            metavar="PORT",
            env="MGPU_METRICS_PORT",
        ),
        Option(
            "metrics_address",
            "the address --metrics-port listens on (default 127.0.0.1: this machine only; 0.0.0.0 for a "
            "Prometheus on another host; $MGPU_METRICS_ADDRESS)",
            address,
            metavar="ADDR",
            env="MGPU_METRICS_ADDRESS",
        ),
        Option(
            "metrics_linger",
            "seconds the final metrics stay served after the run ends (default 35: two scrapes 15 s "
            "apart; $MGPU_METRICS_LINGER)",
            seconds_or_off,
            metavar="S",
            env="MGPU_METRICS_LINGER",
        ),
        Option(
            "stop_grace",
            "seconds between the signal that stops the job (Ctrl-C, SIGTERM, a stall stopped) and "
            f"SIGKILL to what is left of it (default {D.stop_grace:.0f}; 0: at once)",
            seconds_or_off,
            D.stop_grace,
            metavar="S",
        ),
        Option(
            "join_timeout",
            f"several nodes: seconds they wait for each other to join (default {D.join_timeout:.0f})",
            positive_float,
            D.join_timeout,
            metavar="S",
        ),
    )
}


def add(parser: Any, *names: str, **changes: Any) -> None:
    """Add these options to ``parser``; ``changes`` apply to each (help=, default=, ...)."""
    for name in names:
        OPTIONS[name].add_to(parser, **changes)


def mode_flags(args: argparse.Namespace) -> list[str]:
    """The mode options given in ``args``, as their demo reads them (--schedule 1f1b, --manual,
    --no-reshard-after-forward); ValueError("--flag applies to mode M only.") for another mode."""
    flags: list[str] = []
    for option in OPTIONS.values():
        value = getattr(args, option.name, None)
        if option.mode is None or value is None or (option.switch and not value):
            continue
        if args.mode != option.mode:
            raise ValueError(f"{option.flags[0]} applies to mode {option.mode} only.")
        if option.switch:
            flags.append(option.flags[0])
        elif option.negatable:
            flags.append(option.flags[0] if value else f"--no-{option.flags[0][2:]}")
        else:
            flags += [option.flags[0], str(value)]
    return flags


def from_environment(args: argparse.Namespace, names: tuple[str, ...], environ: Any) -> None:
    """Each option of ``names`` not given on the command line, from its environment variable (a
    pod's settings), through the flag's own type: ValueError("NAME must be ...") for a bad value."""
    for name in names:
        option = OPTIONS[name]
        text = environ.get(option.env) if option.env else None
        if getattr(args, name, None) is None and text is not None and text.strip():
            setattr(args, name, option.check(text.strip(), flag=option.env))


def spec_values(args: argparse.Namespace, *names: str) -> dict[str, Any]:
    """The LaunchSpec fields the parsed ``args`` give: each declared option (of ``names``, or all)
    that is a field of it and has a value (None leaves the field's own default); --run-dir is
    ``run_root``."""
    from mgpu_tui.engine.launch.spec import LaunchSpec

    fields = {f.name for f in dataclasses.fields(LaunchSpec)} | {"run_dir"}
    values = {
        name: getattr(args, name)
        for name in names or OPTIONS
        if name in fields and getattr(args, name, None) is not None
    }
    if "run_dir" in values:
        values["run_root"] = Path(values.pop("run_dir"))
    return values
