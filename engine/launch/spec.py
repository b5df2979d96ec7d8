"""The launch spec: what the user asked for, checked against this host.

:func:`resolve` turns a :class:`LaunchSpec` into a :class:`ResolvedSpec` (device
and backend decided) or raises :class:`SpecError` (the user asked for something
that cannot be: exit code 2) or :class:`EnvironmentUnusable` (this machine cannot
run anything: exit code 3). Each carries one sentence meant for the user.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import shutil
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, cast

from mgpu_tui.engine.launch.devices import check_gpus, choose_device, default_nproc
from mgpu_tui.engine.launch.errors import EnvironmentUnusable, SpecError
from mgpu_tui.engine.launch.options import DEVICES, RUN_ROOT
from mgpu_tui.engine.launch.slurm import SlurmJob
from mgpu_tui.engine.machine.host import Host
from mgpu_tui.engine.planning.defaults import DEFAULTS
from mgpu_tui.engine.planning.memory import tied_apart
from mgpu_tui.engine.planning.modes import EXEC, MODES, SCRIPT, Mode, unknown_mode
from mgpu_tui.engine.planning.shapes import MlpShape, ModelShape, ShapeError, model_shape

Device = Literal["auto", "cpu", "cuda"]  # DEVICES (launch/options.py), as a type


def as_device(value: object) -> Device:
    """A --device value read back from a record (ValueError when it is not one)."""
    if isinstance(value, str) and value in DEVICES:
        return cast(Device, value)
    raise ValueError(f"not a device: {value!r}")


@dataclass(frozen=True)
class LaunchSpec:
    mode: str
    nproc: int | None = None  # None: one per GPU on CUDA, 2 on the CPU, 1 for one-process modes
    steps: int = DEFAULTS.steps
    batch_size: int = DEFAULTS.batch_size  # the global batch: every rank together
    lr: float = DEFAULTS.lr  # SGD's learning rate (scale --weak raises it with the batch)
    warmup_steps: int = 0  # the learning rate ramps up linearly over these first steps
    device: Device = "auto"
    run_root: Path = RUN_ROOT
    width: int = DEFAULTS.width
    depth: int = DEFAULTS.depth  # hidden blocks; the model has depth + 1 layers (the blocks and the head)
    # The workload: "mlp" (width, depth), or a GPT of a named size (engine/planning/shapes.py) with
    # any of its layers, d_model, heads, seq_len, vocab changed: (("seq_len", 64), ...).
    model: str = "mlp"
    model_args: tuple[tuple[str, int], ...] = ()
    amp: bool = False
    accum: int = DEFAULTS.accum  # micro-batches per optimizer step
    stages: int = DEFAULTS.stages  # mp: how many GPUs the model spreads over
    microbatches: int = DEFAULTS.microbatches  # pipeline
    verify: bool = False  # compare the final parameters with the single-device baseline
    # A user's own program instead of a mode: a script path or a module name (`-m`), run by
    # torchrun; or a whole command line, run as given (mgpu-tui exec: its own launcher starts the ranks).
    script: str | None = None
    module: str | None = None
    command: tuple[str, ...] = ()
    # Run the program under the bootstrap (engine/rank/bootstrap.py), which reports its steps,
    # samples, loss and memory with no line added; False runs it bare, as torchrun alone would.
    instrument: bool = True
    # torchrun's own options, with its names and meanings.
    nnodes: int = 1
    node_rank: int = 0
    rdzv_endpoint: str | None = None  # HOST:PORT of the c10d rendezvous, for several nodes
    rdzv_id: str | None = None
    # Several nodes: how long the nodes wait for each other to join (torchrun's join_timeout).
    join_timeout: float = DEFAULTS.join_timeout
    max_restarts: int = 0
    master_port: int | None = None
    # The user's name for the run (a NAME: engine/protocol/rundir.py): it ends the run folder's name.
    name: str | None = None
    # The comparison (compare or scale) this run is one row of: its id, kept in spec.json, so that the
    # listings name it and the app can show that comparison again from its runs.
    comparison: str | None = None
    # Seconds between the signal that stops the job and SIGKILL (None: mgpu-tui's own 5 s, for its
    # modes; exec's --stop-grace, 30 s by default; the drop-in's torchrun's own --shutdown-timeout).
    stop_grace: float | None = None
    # A rank silent this long is stalled (None: max(30 s, 10 x the median step time)).
    stall_timeout: float | None = None
    # What a stall does: "stop" the run or "report" it and go on. None: stop a mode's demo; report
    # for a user's own program, whose long silences (evaluation, checkpoints) mgpu-tui cannot know.
    on_stall: Literal["stop", "report"] | None = None
    # Lower the ranks' CPU priority by this much (0-19); the app uses priority.UI_RANK_NICE.
    nice: int = 0
    # Seconds between two samples of the machine kept with the run (telemetry.jsonl); 0: none.
    sample_interval: float = 1.0
    # Let ranks share GPUs (round-robin) when there are fewer GPUs than the mode needs: a big
    # box's job rehearsed on a small one. Such ranks talk over gloo (NCCL refuses two on one GPU).
    share_gpus: bool = False
    force: bool = False  # start more CPU ranks than DEFAULTS.cpu_ranks_per_core per core anyway
    # Further arguments for the demo (--lr 0.1, --schedule 1f1b, ...), passed through as given.
    demo_args: tuple[str, ...] = ()
    # torchrun's own settings that mgpu-tui does not model (--monitor-interval 1, --role trainer),
    # passed to torchrun as given (mgpu-tui torchrun: commands/launchers/torchrun.py).
    launcher_args: tuple[str, ...] = ()
    # The Slurm job and step this node runs in (launch/slurm.py), where its options came from Slurm.
    slurm: SlurmJob | None = None

    @property
    def program(self) -> str | None:
        """The user's own program, as the lists name it: a script, a module, or a command line."""
        return self.script or self.module or (shlex.join(self.command) if self.command else None)

    @property
    def program_line(self) -> str | None:
        """The user's own program with its arguments, as it runs: ``train.py --epochs 3``,
        ``-m pkg.train``, or the command line."""
        if self.command:
            return shlex.join(self.command)
        program = self.script or (f"-m {self.module}" if self.module else None)
        return " ".join([program, *self.demo_args]) if program else None


@dataclass(frozen=True)
class ResolvedSpec:
    spec: LaunchSpec
    mode: Mode
    device: Literal["cpu", "cuda"]
    backend: Literal["gloo", "nccl"]
    # Ranks (or one process's stages) share GPUs: the run is correct, its timings say nothing
    # about a box with a GPU for each.
    shared_gpus: bool = False
    # The ranks of the job; None for a command (mgpu-tui exec), whose ranks say how many they are
    # once they join their process group: the world size is learned, not given.
    world_size: int | None = field(init=False)

    def __post_init__(self) -> None:
        world = self.nproc * self.spec.nnodes if self.mode.multi_process else 1
        object.__setattr__(self, "world_size", None if self.mode.launcher == "command" else world)

    @property
    def process_group(self) -> Literal["gloo", "nccl"] | None:
        """The backend of the process group the run makes; None for a one-process mode, which
        makes none (``backend`` is still what its launch would use, for the environment)."""
        return self.backend if self.mode.multi_process else None

    @property
    def ranks(self) -> int:
        """The world size of a run whose launcher mgpu-tui decides (torchrun, python): known
        before it starts. ValueError for a command's, which its ranks say (world_size None)."""
        if self.world_size is None:
            raise ValueError("a command's world size is learned from its ranks")
        return self.world_size

    @property
    def nproc(self) -> int:
        """The ranks each node starts (resolve() always decides them)."""
        if self.spec.nproc is None:
            raise ValueError("a resolved spec has its --nproc decided")
        return self.spec.nproc

    @property
    def on_stall(self) -> Literal["stop", "report"]:
        """What a stall does (LaunchSpec.on_stall, its default decided by what runs)."""
        if self.spec.on_stall is not None:
            return self.spec.on_stall
        return "report" if self.mode.own_program else "stop"

    @property
    def stall_evidence(self) -> bool:
        """Whether a stall needs evidence (engine/run/causes/watchdog.py): a user's program, whose silences
        mgpu-tui did not write, must show that nothing moves; a demo's silence is enough."""
        return self.mode.own_program and self.spec.instrument

    @property
    def workload(self) -> ModelShape | MlpShape:
        """The model the demos train (resolve() has checked that it can be)."""
        return workload_of(self.spec)

    @property
    def ranks_here(self) -> range:
        """The global ranks this node starts (all of them on one node; for a command, none is
        known before its ranks say: the run's own ranks_here learns them)."""
        if self.world_size is None:
            return range(0)
        per_node = self.world_size // max(1, self.spec.nnodes)
        return range(self.spec.node_rank * per_node, (self.spec.node_rank + 1) * per_node)

    def to_json(self) -> dict:
        spec = dataclasses.asdict(self.spec)
        spec["run_root"] = str(self.spec.run_root)
        spec["demo_args"] = list(self.spec.demo_args)
        spec["launcher_args"] = list(self.spec.launcher_args)
        spec["command"] = list(self.spec.command)
        return {
            **spec,
            "device": self.device,
            "device_requested": self.spec.device,
            "backend": self.backend,
            "shared_gpus": self.shared_gpus,
            "launcher": self.mode.launcher,
            "world_size": self.world_size,
        }


def _stages(mode: Mode, spec: LaunchSpec, nproc: int) -> int:
    """How many consecutive stages the model is cut into."""
    return spec.stages if mode.stages_from == "stages" else nproc


def workload_of(spec: LaunchSpec) -> ModelShape | MlpShape:
    """The spec's model: ShapeError when it cannot be."""
    if spec.model == "mlp":
        if spec.model_args:
            raise ShapeError(
                "--layers, --d-model, --heads, --seq-len and --vocab shape a GPT: add --model "
                "gpt-tiny (or another size); the MLP takes --width and --depth."
            )
        return MlpShape(spec.width, spec.depth)
    return model_shape(spec.model, **dict(spec.model_args))


def workload_problem(mode: Mode, spec: LaunchSpec, workload: ModelShape | MlpShape, nproc: int) -> str | None:
    """Why ``mode`` cannot train ``workload`` over ``nproc`` ranks, in one sentence; None if it can."""
    if mode.splits_heads and isinstance(workload, ModelShape) and workload.heads % nproc:
        return (
            f"tensor parallelism over {nproc} ranks gives each rank whole heads: the model's "
            f"{workload.heads} heads must be a multiple of --nproc."
        )
    if mode.layers_apart and isinstance(workload, ModelShape) and workload.tied_head:
        return tied_apart(mode.name, workload)
    layers = workload.layers + 2 if isinstance(workload, ModelShape) else workload.depth + 1
    if mode.stages_from and (stages := _stages(mode, spec, nproc)) > layers:
        more = "--layers" if isinstance(workload, ModelShape) else "--depth"
        return f"{stages} stages is more than the model's {layers} layers; raise {more}."
    return None


# A program's own arguments (or a command line) are kept in spec.json, whose reader takes at most
# 1 MiB: bounded where they are written, so that a run is never one its own records cannot read.
MAX_PROGRAM_ARGS_BYTES = 256 << 10


def _check_program(spec: LaunchSpec) -> None:
    size = sum(len(a.encode("utf-8", "replace")) + 1 for a in (*spec.demo_args, *spec.command))
    if size > MAX_PROGRAM_ARGS_BYTES:
        raise SpecError(
            f"the program's arguments are {size:,} bytes; at most {MAX_PROGRAM_ARGS_BYTES:,} are kept with "
            "a run (pass a file of them instead)."
        )
    if spec.script and spec.module:
        raise SpecError("give --script or --module, not both.")
    if spec.command and (spec.script or spec.module):
        raise SpecError("give a command, or --script or --module: not both.")
    if spec.script and not spec.instrument and "--no-python" in spec.launcher_args:
        if not (Path(spec.script).is_file() or shutil.which(spec.script)):  # torchrun finds it on PATH
            raise SpecError(f"no such program: {spec.script} (not a file, nor on PATH).")
    elif spec.script:
        path = Path(spec.script)
        if not path.is_file():
            raise SpecError(f"no such script: {spec.script}.")
        if not os.access(path, os.R_OK):
            raise SpecError(f"the script {spec.script} cannot be read (permission denied).")
    if spec.module and not all(part.isidentifier() for part in spec.module.split(".")):
        raise SpecError(f"{spec.module!r} is not a Python module name.")


def _check_nodes(spec: LaunchSpec, mode: Mode) -> None:
    if spec.nnodes < 1:
        raise SpecError(f"--nnodes must be at least 1, got {spec.nnodes}.")
    if not 0 <= spec.node_rank < spec.nnodes:
        raise SpecError(f"--node-rank must be between 0 and {spec.nnodes - 1}, got {spec.node_rank}.")
    if spec.nnodes > 1:
        if not mode.multi_process:
            raise SpecError(f"mode {mode.name!r} runs as one process, on one node.")
        if not spec.rdzv_endpoint:
            raise SpecError("several nodes need --rdzv-endpoint HOST:PORT, the same on every node.")
    if spec.rdzv_endpoint:
        host, _, port = spec.rdzv_endpoint.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise SpecError(f"--rdzv-endpoint must be HOST:PORT, got {spec.rdzv_endpoint!r}.")
        try:  # torchrun would wait for ever on a name that leads nowhere
            socket.getaddrinfo(host.strip("[]"), int(port), type=socket.SOCK_STREAM)
        except (socket.gaierror, UnicodeError) as exc:
            raise SpecError(
                f"--rdzv-endpoint: the host {host!r} cannot be resolved "
                f"({getattr(exc, 'strerror', None) or exc})."
            ) from None
    if spec.join_timeout <= 0:
        raise SpecError(f"--join-timeout must be more than 0 seconds, got {spec.join_timeout}.")
    if spec.master_port is not None and not 0 < spec.master_port < 65536:
        raise SpecError(f"--master-port must be between 1 and 65535, got {spec.master_port}.")
    if spec.sample_interval and spec.sample_interval < 0.1:
        raise SpecError(
            f"--sample-interval must be 0 (no telemetry) or at least 0.1 s, got {spec.sample_interval}."
        )
    if spec.stall_timeout is not None and spec.stall_timeout <= 0:
        raise SpecError(f"--stall-timeout must be more than 0 seconds, got {spec.stall_timeout}.")
    if spec.on_stall not in (None, "stop", "report"):
        raise SpecError(f"--on-stall must be stop or report, got {spec.on_stall!r}.")
    if spec.max_restarts < 0:
        raise SpecError(f"--max-restarts must be 0 or more, got {spec.max_restarts}.")
    if not 0 <= spec.nice <= 19:
        raise SpecError(f"--nice must be between 0 and 19, got {spec.nice}.")


def resolve(spec: LaunchSpec, host: Host) -> ResolvedSpec:
    found = EXEC if spec.command else SCRIPT if spec.script or spec.module else MODES.get(spec.mode)
    if found is None:
        raise SpecError(unknown_mode(str(spec.mode)))
    mode = found
    if mode.own_program:
        _check_program(spec)
    _check_nodes(spec, mode)
    for name, value in (
        ("--nproc", spec.nproc),
        ("--steps", spec.steps),
        ("--batch-size", spec.batch_size),
        ("--accum", spec.accum),
        ("--stages", spec.stages),
        ("--microbatches", spec.microbatches),
        ("--width", spec.width),
        ("--depth", spec.depth),
    ):
        if value is not None and value < 1:
            raise SpecError(f"{name} must be at least 1, got {value}.")
    if not spec.lr > 0:
        raise SpecError(f"--lr must be more than 0, got {spec.lr}.")
    if spec.warmup_steps < 0:
        raise SpecError(f"--warmup-steps must be 0 or more, got {spec.warmup_steps}.")
    if spec.warmup_steps and mode.no_warmup:
        raise SpecError(f"{mode.no_warmup}: it takes no warm-up (--warmup-steps 0).")
    if not mode.multi_process and spec.nproc not in (None, 1):
        raise SpecError(f"mode {mode.name!r} runs as one process; drop --nproc or pass --nproc 1.")
    if not host.torch_available:
        raise EnvironmentUnusable("torch is not installed in this Python environment (see the README).")

    device = choose_device(spec.device, host, spec.share_gpus)
    nproc = spec.nproc if spec.nproc is not None else default_nproc(mode, device, host)
    spec = dataclasses.replace(spec, nproc=nproc)
    if nproc < mode.min_nproc:
        raise SpecError(f"mode {mode.name!r} needs at least {mode.min_nproc} ranks, got --nproc {nproc}.")
    most = DEFAULTS.cpu_ranks_per_core * host.cpu_count
    if device == "cpu" and nproc > most and not spec.force:
        raise SpecError(
            f"--nproc {nproc} would start {nproc} processes on {host.cpu_count} CPU "
            f"core(s); more than {most} only fight over them (--force starts them anyway)."
        )
    if mode is EXEC and (spec.nproc not in (None, 1) or spec.nnodes != 1):
        raise SpecError("a command starts its own ranks: --nproc and the node options are its own.")
    if spec.share_gpus and mode.own_program:
        raise SpecError("--share-gpus is for the modes; your own script chooses its devices.")
    shared = False
    if device == "cuda":
        what = f"mode {mode.name!r} with --nproc {nproc}"
        shared = check_gpus(what, mode.gpus_needed(nproc, spec.stages), host, spec.share_gpus)
    if mode.splits_batch and spec.batch_size % nproc:
        raise SpecError(
            f"--batch-size {spec.batch_size} does not split evenly over {nproc} ranks; "
            f"use a multiple of {nproc}."
        )
    if mode.microbatched and spec.batch_size % (spec.microbatches * spec.accum):
        raise SpecError(
            f"--batch-size {spec.batch_size} does not split into {spec.accum} x {spec.microbatches} "
            "equal micro-batches; choose sizes that divide it."
        )
    try:
        workload = workload_of(spec) if not mode.own_program else None
    except ShapeError as exc:
        raise SpecError(str(exc)) from None
    if workload is not None and (problem := workload_problem(mode, spec, workload, nproc)):
        raise SpecError(problem)
    # NCCL refuses two ranks on one GPU, so ranks that share one talk over gloo.
    backend: Literal["gloo", "nccl"] = "nccl" if device == "cuda" and not shared else "gloo"
    return ResolvedSpec(spec, mode, device, backend, shared)
