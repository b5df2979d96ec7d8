"""What every demo shares: the arguments, the devices, the model and the data (model.py, reached
through here), mixed precision.

The demos stay short because the parts that are the same in every mode live here.
What a mode changes stays in the demo, where a reader sees it: how the model is
wrapped, which slice of the batch a rank trains on, and the training step itself
(forward, loss, backward, optimizer step), since that is where DDP all-reduces,
FSDP gathers and the pipeline schedules. What a demo reports is in reporting.py.

Two workloads (--model): ``mlp``, the quickest, whose task is synthetic but learnable
(inputs are random vectors and each label is the class a fixed random "teacher" matrix
scores highest, so the loss really falls); and a GPT transformer of a named size (gpt-tiny,
gpt-125m, ...) on learnable token sequences (transformer.py). Either way the model is a
sequence of layers, and the global batch for step s is generated from (seed, s) alone:
every rank can make it, and every mode trains on exactly the same data as the baseline.
"""

from __future__ import annotations

import argparse
import gc
import os
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

from mgpu_tui.demos import faults

# The model and the data live in model.py; the demos reach them here, as the rest of what they share.
from mgpu_tui.demos.model import (  # noqa: F401
    CLASSES,
    Block,
    HostBoundary,
    Placed,
    Stage,
    SyntheticTask,
    build_model,
    layer_devices,
    loss,
    n_layers,
)
from mgpu_tui.engine.launch import options
from mgpu_tui.engine.planning.defaults import DEFAULTS
from mgpu_tui.engine.planning.modes import MODES
from mgpu_tui.engine.planning.placement import PlacementError, rank_devices, shares_gpus
from mgpu_tui.engine.planning.shapes import MODELS as SHAPES
from mgpu_tui.engine.planning.shapes import (
    SHAPE_OPTIONS,
    ModelShape,
    ShapeError,
    add_shape_options,
    model_shape,
)
from mgpu_tui.engine.protocol.rundir import params_path


def parse_args(
    description: str,
    argv: list[str] | None = None,
    mode_args: Callable[[argparse.ArgumentParser], None] | None = None,
    known_only: bool = False,
) -> argparse.Namespace:
    """The arguments every demo takes; ``mode_args`` adds a mode's own."""
    # The flags a demo shares with `mgpu-tui run`, declared once (engine/launch/options.py), which
    # passes them on as given; a demo run by hand gets the same defaults and checks.
    parser = argparse.ArgumentParser(description=description)
    options.add(parser, "steps", "batch_size", "warmup_steps", "device", "amp", "amp_dtype", "accum")
    options.add(parser, "share_gpus", "width", "depth")
    options.add(parser, "lr", default=DEFAULTS.lr)
    options.add(parser, "seed", default=DEFAULTS.seed)
    parser.add_argument(
        "--model",
        default="mlp",
        choices=("mlp", *SHAPES, "custom"),
        help="mlp (--width, --depth), or a GPT transformer of a named size",
    )
    add_shape_options(parser)
    parser.add_argument(
        "--save-params", metavar="DIR", help="save the trained parameters here (one file per rank)"
    )
    faults.add_arguments(parser)
    if mode_args is not None:
        mode_args(parser)
    args = parser.parse_known_args(argv)[0] if known_only else parser.parse_args(argv)
    try:
        args.shape = gpt_shape(args)
    except ShapeError as exc:
        parser.error(str(exc))
    return args


def gpt_shape(args: argparse.Namespace) -> ModelShape | None:
    """The transformer's shape, or None for the MLP."""
    if getattr(args, "model", "mlp") == "mlp":
        return None
    return model_shape(args.model, **{field: getattr(args, field) for field in SHAPE_OPTIONS})


# ---- devices ---------------------------------------------------------------------


def _stages(args: argparse.Namespace) -> int:
    return getattr(args, "stages", DEFAULTS.stages)  # only mp takes --stages


def place(mode: str, args: argparse.Namespace, local_rank: int = 0, nproc: int = 1) -> list[torch.device]:
    """The devices this process puts its model on (see engine/placement.py for each mode)."""
    requested = args.device
    if requested == "auto":
        requested = "cuda" if torch.cuda.is_available() else "cpu"
    if requested == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda was asked for, but torch sees no CUDA device.")
    gpus = torch.cuda.device_count() if requested == "cuda" else 0
    try:
        names = rank_devices(
            MODES[mode].layout,
            local_rank,
            gpus,
            nproc=nproc,
            stages=_stages(args),
            device=requested,
            share=args.share_gpus,
        )
    except PlacementError as exc:
        raise SystemExit(str(exc)) from None
    devices = [torch.device(name) for name in names]
    cuda = [d for d in devices if d.type == "cuda"]
    if cuda:
        torch.cuda.set_device(cuda[0])  # this process's default GPU, for NCCL and new tensors
    return devices


@dataclass
class Distributed:
    rank: int
    world: int
    local_rank: int
    devices: list[torch.device]
    shared: bool = False  # ranks share GPUs (--share-gpus): the group is gloo over CUDA tensors

    @property
    def device(self) -> torch.device:
        return self.devices[0]


# Whether start_distributed made the process group (and so shutdown_distributed ends it).
_owns_process_group = False


def start_distributed(mode: str, args: argparse.Namespace) -> Distributed:
    """Read who this rank is from torchrun's environment, place it, join the process group.

    A process that already has a group (``mgpu-tui --check`` runs every mode in
    one launch) keeps it: a second init after destroy would rendezvous again on
    the same store and hang on the first run's stale keys.
    """
    global _owns_process_group
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ["LOCAL_RANK"])
    nproc = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    devices = place(mode, args, local_rank, nproc)
    cuda = devices[0].type == "cuda"
    # NCCL refuses two ranks on one GPU; gloo runs collectives on CUDA tensors (slower, via the host).
    shared = (
        cuda
        and args.share_gpus
        and shares_gpus(MODES[mode].layout, nproc, torch.cuda.device_count(), _stages(args))
    )
    if not dist.is_initialized():
        dist.init_process_group("nccl" if cuda and not shared else "gloo")
        _owns_process_group = True
    return Distributed(rank, world, local_rank, devices, shared)


# ---- mixed precision and micro-batches ---------------------------------------------


def amp_dtype(args: argparse.Namespace, device: torch.device) -> torch.dtype:
    if args.amp_dtype is not None:
        return torch.float16 if args.amp_dtype == "fp16" else torch.bfloat16
    return torch.float16 if device.type == "cuda" else torch.bfloat16


def autocast(args: argparse.Namespace, device: torch.device) -> AbstractContextManager:
    if not args.amp:
        return nullcontext()
    return torch.autocast(device.type, dtype=amp_dtype(args, device))


def grad_scaler(args: argparse.Namespace, device: torch.device) -> torch.amp.GradScaler:
    """A GradScaler that is on only where it is needed: fp16 on CUDA."""
    needed = args.amp and device.type == "cuda" and amp_dtype(args, device) == torch.float16
    return torch.amp.GradScaler(device.type, enabled=needed)


def micro_batches(x: torch.Tensor, y: torch.Tensor, accum: int):
    """The step's batch in ``accum`` micro-batches: (inputs, labels, share of the batch, last?).

    Each micro-batch's mean loss times its share adds up to the whole batch's mean loss,
    so accumulating their gradients gives the gradient of one step on the whole batch.
    """
    xs, ys = x.chunk(accum), y.chunk(accum)
    for i, (mx, my) in enumerate(zip(xs, ys)):
        yield mx, my, len(mx) / len(x), i == len(xs) - 1


def warm_up(optimizer: torch.optim.Optimizer, args: argparse.Namespace, step: int) -> None:
    """Set this step's learning rate: --lr x step / --warmup-steps until the ramp ends, then --lr.

    A batch k times larger takes a k times larger learning rate (the linear scaling rule), but
    not at once: early on, when the weights change fastest, so large a step diverges. Goyal et
    al. 2017 ("Accurate, Large Minibatch SGD") ramp it up over the first epochs; the ramp
    from near zero used here is the common form (torch's LinearLR, most trainers)."""
    if args.warmup_steps:
        for group in optimizer.param_groups:
            group["lr"] = args.lr * min(1.0, step / args.warmup_steps)


def shutdown_distributed() -> None:
    """End the process group cleanly. Delete the wrapped model (DDP, FSDP) and its optimizer first.

    A wrapper caught in reference cycles outlives ``del``; DDP's reducer then holds
    gloo work with tensors until interpreter shutdown, where freeing them aborts the
    process (SIGABRT, "terminate called without an active exception") in a rare run.
    Collecting now frees it while Python is still whole. The barrier keeps a rank
    from tearing down while another is still communicating.
    """
    global _owns_process_group
    gc.collect()
    dist.barrier()
    if _owns_process_group:
        dist.destroy_process_group()
        _owns_process_group = False


def save_gathered_params(model: nn.Module, directory: str | None, rank: int) -> None:
    """Save a model whose parameters are sharded DTensors (FSDP, TP) as whole tensors, from rank 0.

    Every rank must call this: the shards are gathered. Not with full_tensor(): its functional
    all_gather segfaults in gloo on CUDA tensors (ranks sharing a GPU; torch 2.11 on an H100),
    so each rank's shard travels to the others in host memory.
    """
    # Nothing to save, nothing to gather (every rank has the same arguments, so none does): gathering
    # gpt-1.3b's shards in host memory took over 30 s, and a run was called stalled after its last step.
    if not directory:
        return
    from torch.distributed.tensor import DTensor, Shard

    def whole(value: DTensor) -> torch.Tensor:
        (placement,) = value.placements  # a one-dimensional mesh: every rank of the job
        local = value.to_local().detach().cpu()
        if placement.is_replicate():
            return local
        if not isinstance(placement, Shard):
            raise ValueError(f"a parameter placed as {placement} cannot be gathered whole")
        shards: list = [None] * dist.get_world_size()
        dist.all_gather_object(shards, local)
        return torch.cat(shards, dim=placement.dim)

    state = model.state_dict()
    full = {name: whole(v) if isinstance(v, DTensor) else v for name, v in state.items()}
    if rank == 0:
        save_params(full, directory)


def save_params(params: dict[str, torch.Tensor], directory: str | None, rank: int = 0) -> None:
    """Save the parameters this rank is responsible for, named as in the whole model.

    One file per rank (``rank<N>.pt``); --verify merges them, so a mode whose
    parameters live on several ranks (pipeline stages, RPC workers) saves each part
    where it is, with no gather.
    """
    if directory:
        Path(directory).mkdir(parents=True, exist_ok=True)
        tensors = {k: v.detach().cpu().float() for k, v in params.items()}
        torch.save(tensors, params_path(directory, rank))
