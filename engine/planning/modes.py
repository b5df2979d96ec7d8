"""The catalogue of parallelism modes, as data.

Each mode names its demo module, how it is launched, how its ranks lay out on GPUs,
how its model is cut into stages, and whether its CPU path does the real thing or
only goes through the motions (DataParallel, say, only parallelises over CUDA
devices), how it holds memory (memory.py plans each shape), and its own facts (a warm-up it
cannot take, heads it splits). What differs between modes is said here, once: the spec, the
command, placement, the memory plan, --check and compare read it, and never test a mode's name
(tests/unit/test_layers.py). docs/architecture.md says which files adding a mode touches.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from mgpu_tui.engine.machine.host import Host
from mgpu_tui.engine.planning.placement import Layout, gpus_needed
from mgpu_tui.engine.protocol.text import nearest

# torchrun starts the ranks; python is the one rank; a command (mgpu-tui exec) starts them its own way.
Launcher = Literal["torchrun", "python", "command"]
# What a job's ranks communicate, for the advice on why it is slow (engine/run/figures/advice.py):
# DDP's gradient all-reduce, FSDP's gathers and reduce-scatters, a pipeline's sends between stages,
# TP's all-reduces inside every layer, a script's own (its collectives, or a wrapper the watch does
# not know), or none between ranks (one process).
Job = Literal["DDP", "FSDP", "pipeline", "TP", "script's own", "one process"]
# How a mode holds the model's memory: engine/planning/memory.py has one planner a shape.
MemoryShape = Literal[
    "one_device",  # the whole model and its batch on one device
    "replicas_gathered",  # DataParallel: a replica per GPU, the outputs and the optimizer on the first
    "replicated",  # a replica per rank, each its share of the batch, gradient buckets beside
    "optimizer_sharded",  # replicated, each rank the optimizer state of its partition (ZeRO-1)
    "sharded",  # FSDP: every tensor sharded, one unit gathered at a time
    "sharded_kept",  # FSDP without resharding after forward: units stay whole until their backward
    "tensor_split",  # each rank a slice of every matmul (heads, the MLP's width)
    "pipelined",  # consecutive stages, a rank each, micro-batches in flight by the schedule
    "staged",  # consecutive stages, a rank each, the whole batch (rpc)
    "stages_in_process",  # consecutive stages on the GPUs of one process (mp)
    "stage_pairs",  # two stages a rank, ranks replicated (ddp_mp)
    "host_first_layer",  # the first layer in host memory, the rest on one GPU (hybrid)
]


@dataclass(frozen=True)
class Mode:
    name: str
    title: str
    demo: str  # module under mgpu_tui.demos
    launcher: Launcher
    cpu_path: Literal["real", "degenerate"]
    teaches: str
    choose: str  # when a user should pick it
    costs: str = ""  # what each rank holds in memory, and what crosses between devices each step
    # What does not happen on the CPU, and why: one sentence, shown for degenerate modes.
    cpu_note: str = ""
    # Data-parallel ranks split the global batch, so it must divide evenly.
    splits_batch: bool = False
    min_nproc: int = 1
    layout: Layout = "one_per_rank"  # how ranks (or stages) sit on GPUs: placement.py
    # The model is cut into consecutive stages, one per rank ("ranks") or --stages of them.
    stages_from: Literal["ranks", "stages"] | None = None
    microbatched: bool = False  # --microbatches splits each step's batch (pipeline)
    cuda_amp_dtype: str | None = None  # the only AMP dtype it can train on CUDA (rpc: bf16)
    demo_flags: tuple[str, ...] = ()  # what makes its demo this variant (fsdp_grad_op: fsdp's demo)
    own_program: bool = False  # the user's own program runs, not a demo: its steps are its own
    memory: MemoryShape | None = None  # how memory.py plans it (None: no plan, the user's program)
    # Its optimizer keeps the learning rate out of the demo's reach, so it takes no warm-up: why.
    no_warmup: str = ""
    splits_heads: bool = False  # each rank computes whole attention heads: --nproc divides the heads
    rpc_agent: bool = False  # it starts torch's RPC agent beside the group: --check runs it last
    check_scaling: bool = False  # --check --level 3 measures its scaling over the ranks
    job: Job = "one process"  # what its ranks communicate (the advice on why it is slow)

    @property
    def devices_per_rank(self) -> int:
        return 2 if self.layout == "two_per_rank" else 1

    def gpus_needed(self, nproc: int, stages: int = 2) -> int:
        return gpus_needed(self.layout, nproc, stages)

    @property
    def layers_apart(self) -> bool:
        """Its layers sit in different places (stages, processes, devices): a head tied to the
        embeddings cannot be there."""
        return self.stages_from is not None or self.layout in ("two_per_rank", "cpu_then_gpu")

    @property
    def stages_are_devices(self) -> bool:
        """Its one process drives several devices, a stage each (mp, ddp_mp): without GPUs a
        device is called a stage, not a rank."""
        return self.layout in ("stages", "two_per_rank")

    @property
    def module(self) -> str:
        return f"mgpu_tui.demos.{self.demo}"

    @property
    def multi_process(self) -> bool:
        return self.launcher == "torchrun"


def _mode(name: str, title: str, launcher: Launcher, cpu_path, teaches: str, choose: str, **kw) -> Mode:
    return Mode(name, title, name, launcher, cpu_path, teaches, choose, **kw)


MODES: dict[str, Mode] = {
    m.name: m
    for m in (
        _mode(
            "single",
            "Single device (baseline)",
            "python",
            "real",
            "The plain training loop on one device: what every other mode must match.",
            "The model and batch fit one GPU and it is fast enough.",
            costs="All of the model, its gradients and its optimizer state on one device; nothing to "
            "communicate.",
            layout="one_gpu",
            memory="one_device",
        ),
        _mode(
            "dp",
            "nn.DataParallel",
            "python",
            "degenerate",
            "One process replicates the model on every GPU each step, scatters the batch, "
            "gathers the outputs.",
            "Never for new code (DDP is faster); shown for what it is made of.",
            costs="A whole replica on every GPU, copied from GPU 0 every step; the outputs are gathered "
            "back to GPU 0, which holds the most.",
            cpu_note="DataParallel only splits over CUDA devices; on the CPU it runs the model once, "
            "unsplit.",
            layout="every_gpu",
            memory="replicas_gathered",
        ),
        _mode(
            "ddp",
            "DistributedDataParallel",
            "torchrun",
            "real",
            "One process per device, each on its slice of the batch; gradients all-reduced.",
            "The model fits one GPU: the default way to use several.",
            costs="Every rank holds the whole model, its gradients and optimizer state; each step "
            "all-reduces every gradient once (about twice the gradients' bytes per rank), in buckets "
            "that overlap the backward pass.",
            splits_batch=True,
            memory="replicated",
            check_scaling=True,
            job="DDP",
        ),
        _mode(
            "zero1",
            "ZeRO-1: DDP with ZeroRedundancyOptimizer",
            "torchrun",
            "real",
            "DDP, with the optimizer state sharded: each rank steps only its share of the parameters, "
            "then broadcasts them to the others.",
            "DDP fits but the optimizer state (Adam's two buffers a parameter) is what crowds the GPU.",
            costs="Every rank holds the whole model and its gradients, but only its share of the "
            "optimizer state (whole tensors, largest first to the emptiest rank); each step all-reduces "
            "the gradients as DDP does, then broadcasts each rank's updated parameters.",
            splits_batch=True,
            memory="optimizer_sharded",
            job="DDP",
        ),
        _mode(
            "mp",
            "Model parallel (one process)",
            "python",
            "degenerate",
            "Consecutive blocks on different GPUs; activations hop from one to the next.",
            "The model does not fit one GPU and you have one process; only one GPU works at a time.",
            costs="Each GPU holds only its blocks; each step the activations cross to the next GPU and "
            "their gradients come back.",
            cpu_note="every stage sits on the one CPU device, so no activation crosses between devices.",
            layout="stages",
            stages_from="stages",
            memory="stages_in_process",
        ),
        _mode(
            "ddp_mp",
            "DDP over model-parallel ranks",
            "torchrun",
            "degenerate",
            "Each rank's model spans two GPUs; DDP (without device_ids) all-reduces across ranks.",
            "The model needs two GPUs and you want data parallelism on top.",
            costs="Each rank's model is split over its two GPUs (activations hop between them), and its "
            "gradients are all-reduced across ranks as in DDP.",
            layout="two_per_rank",
            splits_batch=True,
            cpu_note="each rank's two stages share the CPU, so only the DDP part is real here.",
            memory="stage_pairs",
            job="DDP",
        ),
        _mode(
            "pipeline",
            "Pipeline parallel (torch.distributed.pipelining)",
            "torchrun",
            "real",
            "One stage per rank; micro-batches flow through the stages (GPipe or 1F1B).",
            "The model is too big for one GPU and layers split cleanly; bubbles cost some speed.",
            costs="Each rank holds its stage's parameters and the activations of the micro-batches in "
            "flight; each micro-batch's activations go forward and their gradients come back between "
            "neighbouring stages.",
            stages_from="ranks",
            microbatched=True,
            memory="pipelined",
            job="pipeline",
        ),
        _mode(
            "fsdp",
            "Fully sharded data parallel (FSDP2 fully_shard)",
            "torchrun",
            "real",
            "Data parallel with parameters, gradients and optimizer state sharded over ranks.",
            "The model's training state does not fit one GPU but one layer does.",
            costs="Each rank keeps 1/N of the parameters, gradients and optimizer state, plus one block "
            "gathered whole at a time; each step all-gathers the parameters (forward and backward) "
            "and reduce-scatters the gradients: about 1.5 times DDP's traffic.",
            splits_batch=True,
            memory="sharded",
            job="FSDP",
        ),
        Mode(
            "fsdp_grad_op",
            "FSDP without resharding after forward (SHARD_GRAD_OP)",
            "fsdp",
            "torchrun",
            "real",
            "FSDP2 with reshard_after_forward=False: each unit's parameters, gathered for forward, stay "
            "whole until its backward, so backward gathers nothing.",
            "FSDP's traffic costs more than its memory saves: the whole model fits one GPU for the "
            "length of a step, but not with its gradients and optimizer state.",
            costs="At rest each rank keeps 1/N of the parameters, gradients and optimizer state, as "
            "fsdp; from forward to backward the whole model's parameters are gathered (ZeRO-2's memory "
            "at the peak); each step all-gathers the parameters once and reduce-scatters the gradients: "
            "DDP's traffic.",
            splits_batch=True,
            demo_flags=("--no-reshard-after-forward",),
            memory="sharded_kept",
            job="FSDP",
        ),
        _mode(
            "rpc",
            "Distributed model parallel (torch.distributed.rpc)",
            "torchrun",
            "real",
            "Rank 0 trains; the later blocks live on other ranks as RemoteModules, "
            "with distributed autograd.",
            "Parts of the model must live in other processes or machines, driven by one trainer.",
            costs="Each rank holds its blocks; every step sends the activations forward and the gradients "
            "back over RPC between the trainer and the other ranks.",
            min_nproc=2,
            stages_from="ranks",
            cuda_amp_dtype="bf16",
            memory="staged",
            no_warmup="rpc's DistributedOptimizer keeps the learning rate on the workers, out of the "
            "demo's reach",
            rpc_agent=True,
            job="pipeline",
        ),
        _mode(
            "tp",
            "Tensor parallel (parallelize_module)",
            "torchrun",
            "real",
            "Each layer's matrices split over ranks: column-wise then row-wise, one all-reduce per block.",
            "Single layers are too big or too slow for one GPU; needs fast links (NVLink).",
            costs="Each rank holds 1/N of every split layer; every block all-reduces its activations "
            "forward and their gradients backward, so traffic comes every layer, not once a step.",
            memory="tensor_split",
            splits_heads=True,
            job="TP",
        ),
        _mode(
            "hybrid",
            "CPU + GPU hybrid",
            "python",
            "degenerate",
            "The first block runs on the CPU, the rest on cuda:0, as in the PyTorch multi-GPU tutorial.",
            "A part of the model (a huge embedding, say) does not fit GPU memory.",
            costs="The first block's weights stay in host memory; each step its activations are copied to "
            "the GPU and their gradients back.",
            cpu_note="with no GPU both parts run on the CPU, so nothing crosses to a GPU.",
            layout="cpu_then_gpu",
            memory="host_first_layer",
        ),
    )
}


# A user's own script or module: launched by torchrun like the multi-process modes.
SCRIPT = Mode(
    name="script",
    title="Your own script",
    demo="",
    launcher="torchrun",
    cpu_path="real",
    teaches="Whatever your script does: its logs, processes, exit status, and with the reporter its figures.",
    choose="To see your own training job the way mgpu-tui shows the demos.",
    costs="Whatever your script does.",
    layout="one_gpu",  # a script picks its own devices: it needs a GPU on CUDA, no more is known
    own_program=True,
    job="script's own",  # until its ranks say they train under DDP or FSDP (advice.py)
)

# Any command line, run as given (mgpu-tui exec): its launcher, whatever it is, starts the ranks, and
# each Python process that joins a process group or steps an optimizer is one
# (engine/rank/watch/process_watch.py).
EXEC = Mode(
    name="exec",
    title="Your own command",
    demo="",
    launcher="command",
    cpu_path="real",
    teaches="Whatever your command does, however it starts its ranks (mp.spawn, Lightning, accelerate).",
    choose="To see a training job that its own launcher starts, unchanged.",
    costs="Whatever your command does.",
    layout="one_gpu",
    own_program=True,
    job="script's own",
)


@dataclass(frozen=True)
class Availability:
    runnable: bool
    device: str | None  # the device "auto" picks here, when runnable
    reason: str


def availability(mode: Mode, host: Host) -> Availability:
    """Whether a mode can run on this host with --device auto, and why not."""
    if not host.torch_available:
        return Availability(False, None, "torch is not installed")
    if host.has_cuda:
        needed = mode.gpus_needed(mode.min_nproc)
        if host.gpu_count < needed:
            return Availability(
                False,
                None,
                f"needs at least {needed} GPUs, {host.gpu_count} visible (--share-gpus runs it on fewer)",
            )
        return Availability(True, "cuda", f"on {host.gpu_count} GPU(s){_talks(mode, 'NCCL')}")
    if mode.cpu_path == "degenerate":
        return Availability(True, "cpu", f"runs, degenerate: {mode.cpu_note}")
    return Availability(True, "cpu", f"on the CPU{_talks(mode, 'gloo')}")


def _talks(mode: Mode, group: str) -> str:
    """How its ranks talk, in a few words: RPC's TensorPipe agent (rpc makes no process group),
    the process group's backend, or nothing for one process."""
    if mode.rpc_agent:
        return " with TensorPipe (RPC)"
    return f" with {group}" if mode.multi_process else ""


def variant(mode: Mode, demo_args: tuple[str, ...] | list[str]) -> Mode:
    """The catalogue's mode that ``mode``'s demo with ``demo_args`` is: ``fsdp`` given
    ``--no-reshard-after-forward`` is ``fsdp_grad_op``, whose demo_flags those are."""
    given = set(demo_args)
    return next(
        (m for m in MODES.values() if m.demo == mode.demo and m.demo_flags and set(m.demo_flags) <= given),
        mode,
    )


def unknown_mode(name: str) -> str:
    """The sentence for a mode that is not one, with the nearest modes when any is near (dpp: dp
    or ddp; fdsp: fsdp)."""
    near = nearest(name.lower(), MODES)
    hint = f"did you mean {' or '.join(map(repr, near))}? " if near else ""
    return f"unknown mode {name!r}; {hint}the modes are: {', '.join(MODES)}."
