"""The grammar of the commands that launch nothing: they read the machine (topo), past and live
runs (runs, open), NCCL's logs (nccl), a model's memory (plan), or write a batch script (slurm).
parser.py adds them to ``mgpu-tui``'s parser."""

from __future__ import annotations

from typing import Any

from mgpu_tui.arguments import (
    MAX_BATCH,
    MAX_MICRO,
    MAX_NODES,
    MAX_RANKS,
    positive_float,
    whole_number,
)
from mgpu_tui.commands.workload import add_model_arguments
from mgpu_tui.engine.launch import options
from mgpu_tui.engine.planning.defaults import DEFAULTS as D


def add_topo(commands: Any) -> None:
    """`topo`: the GPU interconnect."""
    topo = commands.add_parser(
        "topo", help="the GPU interconnect (NVLink, PCIe, NUMA), like nvidia-smi topo -m, and its reading"
    )
    topo.add_argument("--json", action="store_true", help='print JSON: {"gpus": [...], "matrix": [...]}')
    topo.add_argument("--from-file", metavar="FILE", help="read saved `nvidia-smi topo -m` output instead")


def add_runs(commands: Any) -> None:
    """`runs`: the past runs of a folder."""
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


def add_open(commands: Any) -> None:
    """`open`: the app on one run."""
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
        help="a run folder, its name under --run-dir (as `runs` lists it), `latest` (the newest under "
        "--run-dir), or a Slurm job id (its newest step's run)",
    )
    options.add(
        opening, "run_dir", help="the folder of runs, for `latest` and the Runs view (default ./runs)"
    )
    options.add(
        opening,
        "metrics_port",
        help="serve the opened run's figures for Prometheus at http://ADDRESS:PORT/metrics while the "
        "app shows it (default: none; $MGPU_METRICS_PORT)",
    )
    options.add(opening, "metrics_address")


def add_nccl(commands: Any) -> None:
    """`nccl`: NCCL's own log, read."""
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


def add_plan(commands: Any) -> None:
    """`plan`: each GPU's memory, per mode."""
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
    options.add(planning, "schedule", default="gpipe", help="pipeline schedule")
    planning.add_argument("--json", action="store_true", help="print JSON")


def add_slurm(commands: Any) -> None:
    """`slurm`: an sbatch script."""
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


def add_list(commands: Any) -> None:
    """`list`: the modes."""
    listing = commands.add_parser("list", help="the modes, and whether each can run here")
    listing.add_argument("--json", action="store_true", help='print JSON: {"modes": [...]}')
