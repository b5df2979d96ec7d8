"""What every demo shares: arguments, the model, the data, one training step, memory.

The demos stay short because the parts that are the same in every mode live
here. What a mode changes (how the model is wrapped, which slice of the batch a
rank trains on) stays in the demo, where a reader can see it.

The task is synthetic but learnable: inputs are random vectors and each label is
the class a fixed random "teacher" matrix scores highest, so the loss really
falls. The global batch for step s is generated from (seed, s) alone: every rank
can make it, and every mode trains on exactly the same data as the baseline.
"""

from __future__ import annotations

import argparse
import gc
import os
import resource
from contextlib import AbstractContextManager, nullcontext

import torch
import torch.distributed as dist
from torch import nn

from mgpu_tui.engine.reporter import Reporter

CLASSES = 10


def parse_args(description: str, argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--steps", type=int, default=100, help="optimizer steps (default 100)")
    parser.add_argument(
        "--batch-size", type=int, default=64, help="the global batch: all ranks together (default 64)"
    )
    parser.add_argument("--lr", type=float, default=0.02, help="SGD learning rate (default 0.02)")
    parser.add_argument("--seed", type=int, default=0, help="seed for weights and data (default 0)")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    parser.add_argument("--amp", action="store_true", help="mixed precision (autocast)")
    parser.add_argument(
        "--amp-dtype",
        choices=("fp16", "bf16"),
        default=None,
        help="autocast dtype (default: fp16 with GradScaler on CUDA, bf16 on the CPU)",
    )
    parser.add_argument("--accum", type=int, default=1, help="micro-batches per step (default 1)")
    parser.add_argument("--width", type=int, default=256, help="hidden width (default 256)")
    parser.add_argument("--depth", type=int, default=4, help="hidden blocks (default 4)")
    parser.add_argument("--save-params", metavar="PATH", help="save the trained parameters here")
    faults = parser.add_argument_group("fault injection (off unless asked for)")
    faults.add_argument("--fail-at-step", type=int, metavar="K", help="fail at step K")
    faults.add_argument("--fail-rank", type=int, default=0, metavar="R", help="the rank that fails")
    args = parser.parse_args(argv)
    for name in ("steps", "batch_size", "accum", "width", "depth"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    return args


# ---- devices ---------------------------------------------------------------------


def pick_device(requested: str, local_rank: int = 0) -> torch.device:
    """The device for this process; "auto" means CUDA when there is one."""
    if requested == "auto":
        requested = "cuda" if torch.cuda.is_available() else "cpu"
    if requested == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise SystemExit("--device cuda was asked for, but torch sees no CUDA device.")
    if local_rank >= torch.cuda.device_count():
        raise SystemExit(
            f"local rank {local_rank} needs cuda:{local_rank}, "
            f"but only {torch.cuda.device_count()} CUDA device(s) are visible."
        )
    torch.cuda.set_device(local_rank)
    return torch.device("cuda", local_rank)


def device_uuid(device: torch.device) -> str | None:
    """The GPU's UUID as NVML and nvidia-smi write it, so the app can tie a rank to its GPU."""
    if device.type != "cuda":
        return None
    return f"GPU-{torch.cuda.get_device_properties(device).uuid}"


def memory(device: torch.device) -> tuple[int, int]:
    """(current, peak) bytes: the caching allocator's on CUDA, resident set size on the CPU."""
    if device.type == "cuda":
        return torch.cuda.memory_allocated(device), torch.cuda.max_memory_allocated(device)
    with open("/proc/self/statm") as f:
        rss_pages = int(f.read().split()[1])
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss_pages * os.sysconf("SC_PAGE_SIZE"), peak_kib * 1024


# ---- the model and the data ------------------------------------------------------


class Block(nn.Module):
    """A residual MLP block: the unit that later modes place on devices or shard."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.linear = nn.Linear(width, width)
        self.act = nn.GELU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.act(self.linear(x))


def build_model(args: argparse.Namespace) -> nn.Sequential:
    """The same weights on every rank and in every mode: they come from the seed alone."""
    torch.manual_seed(args.seed)
    return nn.Sequential(*(Block(args.width) for _ in range(args.depth)), nn.Linear(args.width, CLASSES))


class SyntheticTask:
    def __init__(self, args: argparse.Namespace) -> None:
        self.seed = args.seed
        self.width = args.width
        teacher_rng = torch.Generator().manual_seed(args.seed + 1)
        self.teacher = torch.randn(args.width, CLASSES, generator=teacher_rng)

    def batch(self, step: int, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The global batch of ``step``: the same on every rank, in every mode."""
        rng = torch.Generator().manual_seed(self.seed * 1_000_003 + step)
        x = torch.randn(batch_size, self.width, generator=rng)
        return x, (x @ self.teacher).argmax(dim=1)


# ---- mixed precision and one training step ---------------------------------------


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


def train_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scaler: torch.amp.GradScaler,
    x: torch.Tensor,
    y: torch.Tensor,
    args: argparse.Namespace,
    device: torch.device,
    no_sync=None,
) -> torch.Tensor:
    """One optimizer step over ``args.accum`` micro-batches; returns the mean loss (detached).

    ``no_sync`` (DDP's ``model.no_sync``) skips the gradient all-reduce on every
    micro-batch but the last, so accumulation costs one all-reduce per step.
    """
    optimizer.zero_grad(set_to_none=True)
    total = torch.zeros((), device=device)
    micro_x, micro_y = x.chunk(args.accum), y.chunk(args.accum)
    for i, (mx, my) in enumerate(zip(micro_x, micro_y)):
        last = i == len(micro_x) - 1
        with (no_sync() if no_sync is not None and not last else nullcontext()):
            with autocast(args, device):
                # Each micro-batch's mean loss, weighted by its share of the batch.
                loss = nn.functional.cross_entropy(model(mx), my) * (len(mx) / len(x))
            scaler.scale(loss).backward()
        total += loss.detach().float()
    scaler.step(optimizer)
    scaler.update()
    return total


# ---- reporting and the end ---------------------------------------------------------


def report_step(reporter: Reporter, step: int, samples: int, loss: torch.Tensor, device) -> None:
    current, peak = memory(device)
    reporter.step(step, samples=samples, loss=loss, mem_bytes=current, mem_peak_bytes=peak)


def maybe_fail(args: argparse.Namespace, step: int, rank: int = 0) -> None:
    """Raise at the step and rank asked for with --fail-at-step/--fail-rank, to test failure handling."""
    if args.fail_at_step == step and args.fail_rank == rank:
        raise RuntimeError(f"injected failure at step {step} on rank {rank}")


def config(args: argparse.Namespace) -> dict:
    return {k: v for k, v in vars(args).items() if k != "save_params"}


def shutdown_distributed() -> None:
    """End the process group cleanly. Delete the wrapped model (DDP, FSDP) and its optimizer first.

    A wrapper caught in reference cycles outlives ``del``; DDP's reducer then holds
    gloo work with tensors until interpreter shutdown, where freeing them aborts the
    process (SIGABRT, "terminate called without an active exception") in a rare run.
    Collecting now frees it while Python is still whole. The barrier keeps a rank
    from tearing down while another is still communicating.
    """
    gc.collect()
    dist.barrier()
    dist.destroy_process_group()


def save_params(model: nn.Module, path: str | None) -> None:
    """Save the trained parameters (on the CPU) so that modes can be compared exactly."""
    if path:
        torch.save({k: v.detach().cpu() for k, v in model.state_dict().items()}, path)
