"""Compare modes side by side, and measure how one mode scales: runs reduced to rows.

Every run is a normal :class:`Run` (its own run directory, logs and summary),
started from one template spec, so the modes train the same model on the same
data, seed and global batch. Each finished run becomes a :class:`Row`:

- step time: the median over steady steps, with p10-p90 (see aggregate.py);
- samples/s global, and per device: per GPU on CUDA, per rank on the CPU;
- tokens/s: global, for a GPT (--model gpt-...): null for the MLP, which reads vectors;
- TFLOP/s per device: the model's training FLOPs x throughput / devices, the
  FLOPs as torch's counter counts them (engine/planning/shapes.py); MFU = that over
  the GPU's dense peak for the precision (engine/machine/peaks.py), where it has one;
- memory per rank: the planner's predicted state and total next to what each
  rank measured (summary.py's ``memory``);
- peak memory per rank (allocator peak on CUDA, peak RSS on the CPU);
- the final loss (full global batch) and the loss curve.

A mode that fails is a row with its status and root cause; the others still run.
``parallel`` runs the modes at once, each on its own GPUs (CUDA_VISIBLE_DEVICES).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from secrets import token_hex

from mgpu_tui.engine.compare import scaling
from mgpu_tui.engine.launch.errors import SpecError
from mgpu_tui.engine.launch.spec import LaunchSpec, workload_of
from mgpu_tui.engine.machine import peaks
from mgpu_tui.engine.planning.modes import MODES, unknown_mode
from mgpu_tui.engine.planning.placement import gpus_needed
from mgpu_tui.engine.planning.shapes import MlpShape, ModelShape
from mgpu_tui.engine.run.lifecycle import Run
from mgpu_tui.engine.run.summary import RunStatus, RunSummary
from mgpu_tui.engine.run.summary_facts import RankMemory
from mgpu_tui.engine.run.watched import Series

PARALLEL_NOTE = (
    "the modes ran at the same time and shared this host (its CPU cores, memory bandwidth "
    "and PCIe): the figures are not a fair race"
)


def train_flops_per_sample(workload: ModelShape | MlpShape) -> float:
    """Training FLOPs for one sample: the MLP's 3 x forward, or a GPT's sequence of tokens at
    6N + 12 L d s a token (PaLM's appendix B)."""
    if isinstance(workload, ModelShape):
        return workload.flops_per_token * workload.seq_len
    return workload.flops_per_sample


def peak_flops(gpu_name: str | None, half_precision: bool) -> float | None:
    """The GPU's dense peak for the demos' precision (16-bit with --amp, else plain fp32: the demos
    leave TF32 off), from the one peak table (engine/machine/peaks.py); None where it has none."""
    return peaks.peak(gpu_name, "bf16" if half_precision else "fp32")[0]


def devices_used(mode: str, device: str, world_size: int, nproc: int, stages: int, gpu_count: int) -> int:
    """The devices a run occupies: GPUs on CUDA (dp takes every visible one), ranks on the CPU."""
    if device == "cpu":
        return world_size
    layout = MODES[mode].layout if mode in MODES else "one_per_rank"  # a user's script: a GPU a rank
    if layout == "every_gpu":
        return gpu_count
    needed = gpus_needed(layout, nproc, stages)
    return min(needed, gpu_count) if gpu_count else needed  # ranks sharing GPUs occupy only those


@dataclass(frozen=True)
class Row:
    mode: str
    status: RunStatus
    world_size: int
    devices: int
    samples_per_s: float | None
    samples_per_s_per_device: float | None
    tokens_per_s: float | None
    step_time_s_median: float | None
    step_time_s_p10_p90: list[float] | None
    tflops_per_device: float | None
    mfu: float | None
    peak_mem_bytes: int | None  # the largest over ranks
    peak_mem_bytes_per_rank: list[int | None]
    final_loss: float | None
    loss_curve: list[list[float]]  # [[step, loss], ...]
    throughput_curve: list[list[float]]  # [[step, samples/s], ...]
    duration_s: float
    run_dir: str
    root_cause: str | None
    note: str | None
    memory: list[RankMemory] = field(default_factory=list)  # per rank: predicted and measured (summary.py)
    tokens_per_s_per_device: float | None = None
    batch_size: int = 0  # the global batch (0: not recorded)
    lr: float | None = None  # the learning rate after any warm-up (None: not recorded)
    label: str | None = None  # what tells the row apart where modes repeat (compare --runs): its run
    busy: str | None = None  # the machine was busy with more than this run (telemetry_log.py)

    @property
    def name(self) -> str:
        """The row as tables, charts and legends name it: its label, else its mode."""
        return self.label or self.mode

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


def row_from_run(run: Run, *, gpu_count: int, gpu_name: str | None) -> Row:
    """The row of a finished run (one with its summary)."""
    summary = run.summary
    if summary is None:
        raise ValueError("a comparison's row is made of a finished run")
    spec = run.resolved.spec
    devices = devices_used(
        run.resolved.mode.name,
        run.resolved.device,
        summary.world_size,
        run.resolved.nproc,
        spec.stages,
        gpu_count,
    )
    return build_row(
        summary,
        mode=run.resolved.mode.name,
        run_dir=summary.run_dir,
        devices=devices,
        flops_per_sample=train_flops_per_sample(run.resolved.workload),
        peak=peak_flops(gpu_name, spec.amp) if run.resolved.device == "cuda" else None,
        steady=run.series(),
        whole=run.whole_series(),
        batch_size=spec.batch_size,
        lr=spec.lr,
    )


def build_row(
    summary: RunSummary,
    *,
    mode: str,
    run_dir: str,
    devices: int,
    flops_per_sample: float | None,
    peak: float | None,
    steady: Series,
    whole: Series,
    batch_size: int,
    lr: float | None,
) -> Row:
    """A comparison's row, the one way: from a run's summary, what it ran on (``devices``; the
    GPU's ``peak`` FLOP/s, None off a GPU), its model's training FLOPs a sample (None: not known,
    a script's) and its series: the ``steady`` steps for the throughput curve, the ``whole`` run for
    the loss. A run the app compares and one read back from its folder are both made here."""
    rate = summary.samples_per_s
    per_device = rate / devices if rate is not None and devices else None
    tflops = per_device * flops_per_sample / 1e12 if per_device and flops_per_sample else None
    steps, rates, _ = steady
    loss_steps, _, losses = whole
    peaks = [p for p in summary.peak_mem_bytes if p is not None]
    return Row(
        mode=mode,
        status=summary.status,
        world_size=summary.world_size,
        devices=devices,
        samples_per_s=rate,
        samples_per_s_per_device=per_device,
        tokens_per_s=summary.tokens_per_s,
        step_time_s_median=summary.step_time_s_median,
        step_time_s_p10_p90=list(summary.step_time_s_p10_p90) if summary.step_time_s_p10_p90 else None,
        tflops_per_device=tflops,
        mfu=tflops * 1e12 / peak if tflops and peak else None,
        peak_mem_bytes=max(peaks) if peaks else None,
        peak_mem_bytes_per_rank=list(summary.peak_mem_bytes),
        final_loss=summary.final_loss,
        loss_curve=[[s, v] for s, v in zip(loss_steps, losses) if v is not None],
        throughput_curve=[[s, r] for s, r in zip(steps, rates)],
        duration_s=summary.duration_s,
        run_dir=run_dir,
        root_cause=summary.root_cause.headline() if summary.root_cause else None,
        note=summary.note,
        memory=list(summary.memory),
        tokens_per_s_per_device=summary.tokens_per_s / devices if summary.tokens_per_s and devices else None,
        batch_size=batch_size,
        lr=lr,
        busy=summary.telemetry.busy if summary.telemetry else None,
    )


@dataclass(frozen=True)
class TemplateSettings:
    """What every run of a comparison made from one template shares."""

    nproc: int | None
    steps: int
    batch_size: int
    lr: float
    device: str
    amp: bool
    width: int
    depth: int
    model: str
    model_shape: dict | None  # a GPT's shape (shapes.py to_json); None for the MLP
    flops_per_sample: float


@dataclass(frozen=True)
class CompareSettings(TemplateSettings):
    modes: tuple[str, ...]


@dataclass(frozen=True)
class ScaleSettings(TemplateSettings):
    mode: str
    sweep: str  # strong, weak or batch (scaling.py)
    nprocs: tuple[int, ...]
    batch_sizes: tuple[int, ...]
    lr_rule: str
    warmup_steps: int


@dataclass(frozen=True)
class RunsSettings:
    """``compare --runs``: finished runs read back, and whether they can be compared."""

    runs: tuple[str, ...]
    comparable: bool
    differences: tuple[str, ...]  # what differs between them, each in a sentence


def new_comparison_id() -> str:
    return f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{token_hex(2)}"


@dataclass
class Comparison:
    kind: str  # "compare" or "scale"
    settings: CompareSettings | ScaleSettings | RunsSettings
    rows: list[Row] = field(default_factory=list)
    parallel: bool = False
    started_at: float = field(default_factory=time.time)
    ended_at: float | None = None
    interrupted: bool = False
    # What its runs record as theirs (LaunchSpec.comparison): its start in UTC and a few random
    # letters, a NAME (two comparisons started in the same second stay apart).
    id: str = field(default_factory=new_comparison_id)

    @property
    def failed(self) -> bool:
        return self.interrupted or any(r.status is not RunStatus.OK for r in self.rows)

    @property
    def scale(self) -> ScaleSettings:
        """A scale's settings (TypeError for another comparison: a bug, not the user's)."""
        if not isinstance(self.settings, ScaleSettings):
            raise TypeError(f"a {self.kind} comparison has no scale settings")
        return self.settings

    def points(self) -> list[scaling.ScalePoint]:
        """For ``scale``: each point's figures (scaling.py)."""
        return scaling.points(self.rows, self.scale.sweep, self.scale.steps)

    def to_json(self) -> dict:
        document = {
            "kind": self.kind,
            "id": self.id,
            "settings": dataclasses.asdict(self.settings),
            "parallel": self.parallel,
            "note": PARALLEL_NOTE if self.parallel else None,
            "started_at": self.started_at,
            "duration_s": (self.ended_at or time.time()) - self.started_at,
            "interrupted": self.interrupted,
            "rows": [r.to_json() for r in self.rows],
        }
        if self.kind == "scale":
            document["mode"] = self.scale.mode
            document["points"] = [p.to_json() for p in self.points()]
        return document


def _settings(template: LaunchSpec) -> dict:
    """The TemplateSettings fields of ``template``."""
    workload = workload_of(template)
    return {
        "nproc": template.nproc,
        "steps": template.steps,
        "batch_size": template.batch_size,
        "lr": template.lr,
        "device": template.device,
        "amp": template.amp,
        "width": template.width,
        "depth": template.depth,
        "model": template.model,
        "model_shape": workload.to_json() if isinstance(workload, ModelShape) else None,
        "flops_per_sample": train_flops_per_sample(workload),
    }


def compare_specs(modes: Sequence[str], template: LaunchSpec) -> list[LaunchSpec]:
    """One spec per mode; one-process modes take no --nproc."""
    specs = []
    for mode in modes:
        if mode not in MODES:
            raise SpecError(unknown_mode(mode))
        nproc = template.nproc if MODES[mode].multi_process else None
        specs.append(dataclasses.replace(template, mode=mode, nproc=nproc))
    return specs


def new_comparison(modes: Sequence[str], template: LaunchSpec, parallel: bool = False) -> Comparison:
    return Comparison(
        "compare", CompareSettings(**_settings(template), modes=tuple(modes)), parallel=parallel
    )


def new_scaling(mode: str, specs: Sequence[LaunchSpec], sweep: str, lr_rule: str) -> Comparison:
    """The comparison of ``scale``'s points (scaling.scale_specs), with how they were chosen."""
    first = specs[0]
    return Comparison(
        "scale",
        ScaleSettings(
            **_settings(first),
            mode=mode,
            sweep=sweep,
            nprocs=tuple(sorted({s.nproc or 0 for s in specs})),
            batch_sizes=tuple(s.batch_size for s in specs),
            lr_rule=lr_rule,
            warmup_steps=first.warmup_steps,
        ),
    )
