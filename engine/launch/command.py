"""The one place that builds a launch command: a pure function, spec in, argv and env out.

Nothing here starts a process or reads the machine: everything it depends on
(the interpreter, the CPU count, the environment) comes in as arguments, so it
is tested exactly as it will run.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from mgpu_tui.engine.launch.spec import ResolvedSpec
from mgpu_tui.engine.planning.defaults import DEFAULTS
from mgpu_tui.engine.protocol.environment import RUN_DIR_ENV, RUN_ID_ENV, WATCH_PATHS_ENV
from mgpu_tui.engine.protocol.rundir import RunDir

BOOTSTRAP = "mgpu_tui.engine.rank.bootstrap"
# mgpu-tui exec: the folder whose sitecustomize every Python process of the command runs
# (engine/rank/sitewatch/sitecustomize.py), and where that finds mgpu-tui's own packages.
SITEWATCH_DIR = str(Path(__file__).resolve().parent.parent / "rank" / "sitewatch")
WATCH_PATHS = ";".join(
    f"{name}={Path(folder).resolve()}"
    for name, folder in (
        ("mgpu_tui", Path(__file__).parents[2] / "mgpu_tui"),
        ("mgpu_tui.engine", Path(__file__).parents[1]),
    )
)
# What a torchrun worker's environment holds (torch.distributed.elastic's agent sets them): a command
# run by mgpu-tui exec from inside such a worker must not take them for its own (mp.spawn's ranks
# would wait for the agent's store, which never comes).
TORCHRUN_WORKER_ENV = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "GROUP_WORLD_SIZE",
    "ROLE_RANK",
    "ROLE_NAME",
    "ROLE_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
)
SHUTDOWN_TIMEOUT_S = 5


@dataclass(frozen=True)
class Launch:
    argv: tuple[str, ...]
    env: dict[str, str]  # the whole environment for the child
    env_changes: dict[str, str | None]  # what differs from the parent's (None: removed)
    python: str  # the interpreter of the run's keeper (launch/keeper.py): mgpu-tui's, whatever runs below it


def demo_argv(resolved: ResolvedSpec, run_dir: RunDir) -> list[str]:
    """The demo's arguments: everything that decides what is trained, spelled out."""
    spec = resolved.spec
    argv = [
        "--steps",
        str(spec.steps),
        "--batch-size",
        str(spec.batch_size),
        "--device",
        resolved.device,
        "--width",
        str(spec.width),
        "--depth",
        str(spec.depth),
        "--accum",
        str(spec.accum),
    ]
    if spec.lr != DEFAULTS.lr:
        argv += ["--lr", repr(spec.lr)]
    if spec.warmup_steps:
        argv += ["--warmup-steps", str(spec.warmup_steps)]
    if spec.amp:
        argv.append("--amp")
        only = resolved.mode.cuda_amp_dtype
        if only and resolved.device == "cuda" and "--amp-dtype" not in spec.demo_args:
            # A mode that can train one AMP dtype only on CUDA (rpc: bf16, as fp16's GradScaler
            # does not work with distributed autograd): said here, so --verify's baseline matches.
            argv += ["--amp-dtype", only]
    if spec.model != "mlp":
        argv += ["--model", spec.model]
        for name, value in spec.model_args:
            argv += [f"--{name.replace('_', '-')}", str(value)]
    if resolved.shared_gpus:
        argv.append("--share-gpus")
    if resolved.mode.stages_from == "stages":
        argv += ["--stages", str(spec.stages)]
    if resolved.mode.microbatched:
        argv += ["--microbatches", str(spec.microbatches)]
    if spec.verify:
        argv += ["--save-params", str(run_dir.params_dir)]
    return argv + list(resolved.mode.demo_flags) + list(spec.demo_args)


# torchrun gives up joining later than mgpu-tui's own watch (engine/nodes/watch.py), which says why.
JOIN_TIMEOUT_MARGIN_S = 60


def _rendezvous(resolved: ResolvedSpec, local_addr: str | None) -> list[str]:
    """How the ranks find each other, with torchrun's own flags."""
    spec = resolved.spec
    if spec.rdzv_endpoint:  # resolve() requires one for several nodes
        # Several nodes: torchrun's c10d rendezvous at an endpoint every node names alike. The store
        # is hosted by mgpu-tui's node link on the node that owns the endpoint's address
        # (engine/nodes/watch.py), so every torchrun joins it as a client: is_host=false. Without
        # that, torchrun decides by its hostname, and a host whose name does not resolve to the
        # endpoint's address hosts nothing, leaving every node waiting.
        conf = f"is_host=false,join_timeout={int(spec.join_timeout) + JOIN_TIMEOUT_MARGIN_S}"
        argv = [
            "--nnodes",
            str(spec.nnodes),
            "--node-rank",
            str(spec.node_rank),
            "--rdzv-backend",
            "c10d",
            "--rdzv-endpoint",
            str(spec.rdzv_endpoint),
            "--rdzv-id",
            spec.rdzv_id or "mgpu-tui",
            "--rdzv-conf",
            conf,
        ]
        if local_addr:
            # The address the other nodes reach this one at (the route to the endpoint): torchrun
            # publishes it as the workers' MASTER_ADDR, instead of a hostname they may not resolve.
            argv += ["--local-addr", local_addr]
        return argv
    if spec.master_port is not None:
        # One node, a port the user chose: the static rendezvous, on loopback.
        return ["--master-addr", "127.0.0.1", "--master-port", str(spec.master_port)]
    # Standalone: a local c10d rendezvous on a free port the OS picks, so two runs never collide.
    return ["--standalone"]


# The flight recorder's size (torch 2.13 warns about the older TORCH_NCCL_TRACE_BUFFER_SIZE, and
# reads this one for gloo and NCCL alike).
FR_BUFFER_ENV = ("TORCH_FR_BUFFER_SIZE",)
FR_BUFFER_ENTRIES = 2000


def build_command(
    resolved: ResolvedSpec,
    run_dir: RunDir,
    run_id: str,
    *,
    python: str,
    cpu_count: int,
    base_env: Mapping[str, str],
    local_addr: str | None = None,
    buffered_as_bare: bool = False,
) -> Launch:
    """The argv and environment that start ``resolved`` with its output in ``run_dir``.

    ``local_addr``: several nodes, this node's address on the route to the rendezvous endpoint.
    ``buffered_as_bare``: a command in the foreground (exec, headless), whose output is a terminal
    or a pipe as bare: no PYTHONUNBUFFERED (its prints are buffered as they would be)."""
    mode, spec = resolved.mode, resolved.spec
    if mode.launcher == "command":
        return _command_launch(resolved, run_dir, run_id, base_env, python, unbuffered=not buffered_as_bare)
    if mode.multi_process:
        argv = [
            python,
            "-m",
            "torch.distributed.run",
            *_rendezvous(resolved, local_addr),
            "--nproc-per-node",
            str(spec.nproc),
            # Every rank's stdout and stderr in its own file: nothing interleaves, nothing is lost.
            "--log-dir",
            str(run_dir.logs_dir),
            "--redirects",
            "3",
        ]
        if spec.max_restarts:
            argv += ["--max-restarts", str(spec.max_restarts)]
        argv += spec.launcher_args
    else:
        argv = [python]
    program = ["-m", spec.module] if spec.module else [spec.script] if spec.script else None
    if program and spec.instrument:
        # The script still runs as __main__ with its own argv (engine/rank/bootstrap.py says how).
        argv += ["-m", BOOTSTRAP, *program, *spec.demo_args]
    elif program:
        argv += [*program, *spec.demo_args]  # the user's own arguments, untouched
    else:
        argv += ["-m", mode.module, *demo_argv(resolved, run_dir)]

    changes: dict[str, str | None] = {}
    # torchrun reads PET_<FLAG> as a default for each flag: a stray one from the
    # user's shell would silently change the launch.
    for name in base_env:
        if name.startswith("PET_"):
            changes[name] = None
    _of_the_run(changes, run_dir, run_id)
    if mode.multi_process:
        _collectives_recorded(changes, resolved, base_env)
    if mode.multi_process and "TORCH_ELASTIC_SHUTDOWN_TIMEOUT" not in base_env and spec.stop_grace is None:
        # When a rank fails, torchrun sends the others SIGTERM and waits this long before
        # SIGKILL (30 s by default): a rank stuck in a collective would hold the run that long.
        # Not under the drop-in (a stop grace of its own): torchrun's own, as bare.
        changes["TORCH_ELASTIC_SHUTDOWN_TIMEOUT"] = str(SHUTDOWN_TIMEOUT_S)
    if "OMP_NUM_THREADS" not in base_env:
        # Share the cores out, so ranks do not fight over them.
        changes["OMP_NUM_THREADS"] = str(max(1, cpu_count // resolved.ranks))
    if resolved.backend == "nccl" and "NCCL_DEBUG" not in base_env:
        # NCCL's own account of how the ranks talk, kept with the run (engine/run/nccl/nccl_record.py
        # reads it back): into files of the run directory, not the ranks' logs.
        changes["NCCL_DEBUG"] = "INFO"
        if "NCCL_DEBUG_SUBSYS" not in base_env:
            changes["NCCL_DEBUG_SUBSYS"] = "INIT,GRAPH,ENV"
        if "NCCL_DEBUG_FILE" not in base_env:
            changes["NCCL_DEBUG_FILE"] = run_dir.nccl_log_pattern  # NCCL fills in host and pid
    if not mode.multi_process:
        # torchrun sets this for its ranks; a one-process mode gets the same, so
        # @record writes its error file where the engine looks for it.
        changes["TORCHELASTIC_ERROR_FILE"] = str(run_dir.python_error_file())

    return _launch(argv, base_env, changes, python)


def _of_the_run(
    changes: dict[str, str | None], run_dir: RunDir, run_id: str, *, unbuffered: bool = True
) -> None:
    """Where the run's events go (an absolute path: a rank may change directory first), its id on
    every process of it, and (``unbuffered``) its output unbuffered: a mode's and a script's go to
    files, and reach them as they are printed."""
    changes[RUN_DIR_ENV] = str(run_dir.path.absolute())
    changes[RUN_ID_ENV] = run_id
    if unbuffered:
        changes["PYTHONUNBUFFERED"] = "1"


def _collectives_recorded(
    changes: dict[str, str | None], resolved: ResolvedSpec, base_env: Mapping[str, str]
) -> None:
    """PyTorch's flight recorder keeps each rank's recent collectives (gloo and NCCL): when a run
    stalls, they say which rank never entered which collective (watchdog.py's verdict). On NCCL,
    each collective's GPU duration too: the CPU runs ahead of the GPU, so these, not the enqueue
    times, say who arrives late (run/nccl/flight_records.py). The user's own settings win."""
    if not any(name in base_env for name in FR_BUFFER_ENV):
        for name in FR_BUFFER_ENV:
            changes[name] = str(FR_BUFFER_ENTRIES)
    if resolved.backend == "nccl" and "TORCH_NCCL_ENABLE_TIMING" not in base_env:
        changes["TORCH_NCCL_ENABLE_TIMING"] = "1"


def _launch(
    argv: list[str], base_env: Mapping[str, str], changes: dict[str, str | None], python: str
) -> Launch:
    env = {k: v for k, v in base_env.items() if changes.get(k, "") is not None}
    env.update({k: v for k, v in changes.items() if v is not None})
    return Launch(tuple(argv), env, changes, python)


def _command_launch(
    resolved: ResolvedSpec,
    run_dir: RunDir,
    run_id: str,
    base_env: Mapping[str, str],
    python: str,
    *,
    unbuffered: bool,
) -> Launch:
    """mgpu-tui exec: the command as given, never inside a torchrun worker. Its environment is the
    user's, with none of a torchrun worker's (should mgpu-tui itself run in one) and, unless
    ``--no-instrument``, the sitewatch folder first on PYTHONPATH."""
    changes: dict[str, str | None] = {}
    inside_a_worker = "TORCHELASTIC_RUN_ID" in base_env
    for name in base_env:
        if name.startswith(("TORCHELASTIC_", "PET_")) or (inside_a_worker and name in TORCHRUN_WORKER_ENV):
            changes[name] = None
    _of_the_run(changes, run_dir, run_id, unbuffered=unbuffered)
    if resolved.spec.instrument:
        path = base_env.get("PYTHONPATH")
        changes["PYTHONPATH"] = SITEWATCH_DIR + (os.pathsep + path if path else "")
        changes[WATCH_PATHS_ENV] = WATCH_PATHS
    _collectives_recorded(changes, resolved, base_env)
    return _launch(list(resolved.spec.command), base_env, changes, python)
