"""``scale``: one mode over several rank counts or batch sizes, and what each point costs.

Three sweeps, one spec per point, all from one template:

- strong (``--nproc 1,2,4``): the global batch stays; each rank gets a smaller share.
- weak (``--nproc 1,2,4 --weak``): the batch per rank stays (``--batch-size`` is per rank),
  so the global batch grows with the ranks, as it does when a job moves to a bigger box.
- batch (``--nproc 2 --batch-size 32,64,128``): one rank count, the global batch swept.

Where the global batch changes, so does the learning rate, by ``--lr-rule`` against the
first point's batch: ``linear`` (Goyal et al. 2017: k times the batch, k times the lr),
``sqrt`` (Krizhevsky 2014; Hoffer et al. 2017: the same gradient noise), or ``none``. A
larger lr needs a warm-up: every point ramps up over ``--warmup-steps`` (default: a fifth
of the steps). Each point then reports its throughput and the loss it reached after the
same number of samples as the others (the first point's whole run), so the speed is
shown next to what it costs in convergence.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from mgpu_tui.engine.launch.errors import SpecError
from mgpu_tui.engine.launch.spec import LaunchSpec
from mgpu_tui.engine.planning.defaults import LR_RULES
from mgpu_tui.engine.planning.modes import MODES, unknown_mode
from mgpu_tui.engine.run.summary import RunStatus

if TYPE_CHECKING:
    from mgpu_tui.engine.compare.comparison import Row

SWEEPS = ("strong", "weak", "batch")
# samples/s against the global batch over the median step: within this ratio the two agree; past it
# a row says which holds and why they differ (a busy machine read 1,282 samples/s beside a median
# step of 8.6 ms at batch 64, which is 7,442/s).
AGREE_WITHIN = 1.25


def step_of_rate(batch_size: int, samples_per_s: float | None) -> float | None:
    """The step time a throughput counts: the global batch over samples/s, a mean over the steps'
    whole time (aggregate.py sums each step's seconds, waits included), where the median is the
    typical step. None where either is not known."""
    return batch_size / samples_per_s if batch_size and samples_per_s else None


def figures_disagree(batch_size: int, samples_per_s: float | None, median: float | None) -> bool:
    """Whether samples/s and the median step contradict each other (a few steps far slower than
    most: the machine was busy, a checkpoint, a data stall)."""
    mean = step_of_rate(batch_size, samples_per_s)
    if not mean or not median:
        return False
    return max(mean, median) / min(mean, median) > AGREE_WITHIN


def scaled_lr(lr: float, ratio: float, rule: str) -> float:
    """The learning rate for a global batch ``ratio`` times the reference one."""
    if rule == "linear":
        return lr * ratio
    if rule == "sqrt":
        return lr * math.sqrt(ratio)
    if rule == "none":
        return lr
    raise SpecError(f"--lr-rule must be one of {', '.join(LR_RULES)}, got {rule!r}.")


def default_warmup(sweep: str, steps: int) -> int:
    """Strong scaling keeps the batch and the lr: nothing to warm up. The others: a fifth of the run."""
    return 0 if sweep == "strong" else max(1, steps // 5)


def sweep_of(nprocs: Sequence[int], batch_sizes: Sequence[int], weak: bool) -> str:
    """Which sweep the counts describe; SpecError when they describe none."""
    if len(batch_sizes) > 1:
        if weak:
            raise SpecError("--weak grows the batch with the ranks; sweep --batch-size without it.")
        if len(nprocs) > 1:
            raise SpecError(
                "sweep the rank counts or the batch sizes, not both: give one of them a single value."
            )
        return "batch"
    return "weak" if weak else "strong"


def scale_specs(
    mode: str,
    nprocs: Sequence[int],
    batch_sizes: Sequence[int],
    template: LaunchSpec,
    *,
    weak: bool = False,
    lr_rule: str = "linear",
    warmup_steps: int | None = None,
) -> list[LaunchSpec]:
    """One spec per point, smallest first. With ``weak``, ``batch_sizes[0]`` is the batch per rank."""
    if mode not in MODES:
        raise SpecError(unknown_mode(mode))
    if not MODES[mode].multi_process:
        raise SpecError(f"mode {mode!r} runs as one process; scale a multi-process mode (ddp, fsdp, ...).")
    if len(set(nprocs)) != len(nprocs):
        raise SpecError("--nproc lists a rank count twice.")
    if len(set(batch_sizes)) != len(batch_sizes):
        raise SpecError("--batch-size lists a batch size twice.")
    sweep = sweep_of(nprocs, batch_sizes, weak)
    if sweep == "weak" and not MODES[mode].splits_batch:
        raise SpecError(
            f"--weak keeps each rank's share of the batch, but {mode} gives every rank the whole "
            "batch, so its work would grow with the ranks: scale it with the global batch fixed "
            "(no --weak), or sweep --batch-size."
        )
    if sweep == "batch":
        points = [(nprocs[0], b) for b in sorted(batch_sizes)]
    else:  # weak: the batch given is each rank's
        batch = batch_sizes[0]
        points = [(n, batch * n if weak else batch) for n in sorted(nprocs)]
    if warmup_steps is not None:
        warmup = warmup_steps  # a mode whose optimizer is out of the demo's reach refuses one (spec.py)
    else:
        warmup = 0 if MODES[mode].no_warmup else default_warmup(sweep, template.steps)
    reference = points[0][1]
    return [
        dataclasses.replace(
            template,
            mode=mode,
            nproc=n,
            batch_size=b,
            warmup_steps=warmup,
            lr=scaled_lr(template.lr, b / reference, lr_rule),
        )
        for n, b in points
    ]


def common_samples(rows: Sequence[Row], steps: int) -> int | None:
    """The samples every point saw: the smallest global batch's whole run."""
    batches = [r.batch_size for r in rows if r.batch_size]
    return min(batches) * steps if batches else None


def loss_after(row: Row, samples: int) -> tuple[int, float] | None:
    """(step, loss) at the last recorded step whose samples so far do not pass ``samples``."""
    reached = [(s, v) for s, v in row.loss_curve if s * row.batch_size <= samples]
    return (int(reached[-1][0]), reached[-1][1]) if reached else None


@dataclasses.dataclass(frozen=True)
class ScalePoint:
    """One point of a scale: its figures, and against the first point that ran ok."""

    nproc: int
    batch_size: int  # 0: not recorded
    lr: float | None
    status: RunStatus
    samples_per_s: float | None
    tokens_per_s: float | None
    speedup: float | None  # against the first point that ran ok
    efficiency: float | None  # none for a batch sweep
    step_time_s_median: float | None
    peak_mem_bytes: int | None
    loss_step: int | None  # the step at which it had seen the samples every point saw
    loss_after_common_samples: float | None
    final_loss: float | None
    run_dir: str
    step_time_s_mean: float | None = None  # the step samples/s counts (step_of_rate)

    @property
    def figures_disagree(self) -> bool:
        """Its samples/s and its median step contradict each other (the row says why)."""
        return figures_disagree(self.batch_size, self.samples_per_s, self.step_time_s_median)

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


def points(rows: Sequence[Row], sweep: str, steps: int) -> list[ScalePoint]:
    """Each point's throughput, speedup and efficiency against the first point that ran ok, its
    global batch and lr, and its loss after the samples every point saw.

    efficiency(N) = throughput(N) / (N / n0 x throughput(n0)): for strong and weak scaling alike
    (weak: each rank's work stays, so this is also step_time(n0) / step_time(N)); none for a
    batch sweep, where the ranks do not change.
    """
    ordered = sorted(rows, key=lambda r: (r.world_size, r.batch_size))
    base = next((r for r in ordered if r.status is RunStatus.OK and r.samples_per_s), None)
    budget = common_samples(rows, steps)
    out = []
    for r in rows:
        speedup = efficiency = None
        if base and base.samples_per_s and r.status is RunStatus.OK and r.samples_per_s:
            speedup = r.samples_per_s / base.samples_per_s
            if sweep != "batch":
                efficiency = speedup / (r.world_size / base.world_size)
        at = loss_after(r, budget) if budget else None
        out.append(
            ScalePoint(
                nproc=r.world_size,
                batch_size=r.batch_size,
                lr=r.lr,
                status=r.status,
                samples_per_s=r.samples_per_s,
                tokens_per_s=r.tokens_per_s,
                speedup=speedup,
                efficiency=efficiency,
                step_time_s_median=r.step_time_s_median,
                peak_mem_bytes=r.peak_mem_bytes,
                loss_step=at[0] if at else None,
                loss_after_common_samples=at[1] if at else None,
                final_loss=r.final_loss,
                run_dir=r.run_dir,
                step_time_s_mean=step_of_rate(r.batch_size, r.samples_per_s),
            )
        )
    return out
