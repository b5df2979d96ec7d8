"""What each verdict on why a job is slow (anatomy.py) says, and the change it offers, by what the
job is: one row a verdict and a job, with its advice on a GPU and on the CPU.

The verdict names what it measured (its number is anatomy.py's); the row says what that part is
for this kind of job (``says``: the communication of a pipeline is its stages' sends, not DDP's
all-reduce) and the change to try where one applies (``gpu``, ``cpu``). An advice that does not
apply is left out (None): a one-process job has no communication to cut, a CPU has no pinned
memory to copy from. ``{loader}`` in the input-bound advice is what the rank's DataLoader said of
its workers (:func:`loader_words`).

The job is the catalogue's (engine/planning/modes.py ``Mode.job``); a user's script is "script's
own" until its ranks say their batches enter DistributedDataParallel or FSDP (the ``about`` event's
batch source, :func:`job_of`). The device is the ranks' own word (``cuda:N`` or ``cpu``).

docs/run-view.md holds this table for users; tests/unit/test_advice.py walks it: each row is what
the verdict says for that job and device, and none speaks of what the job does not have.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from mgpu_tui.engine.planning.modes import Job

Device = Literal["GPU", "CPU"]
JOBS: tuple[Job, ...] = ("DDP", "FSDP", "pipeline", "TP", "script's own", "one process")


@dataclass(frozen=True)
class Advice:
    """One verdict for one kind of job: what its measured part is (None: the verdict's own words),
    and the change to try on a GPU and on the CPU (None: nothing that applies)."""

    verdict: str  # anatomy.py's kind: input-bound, straggler, communication-bound, compute-bound, host-bound
    job: Job
    says: str | None
    gpu: str | None
    cpu: str | None


_INPUT_GPU = "{loader}; pin_memory=True, so that each batch's copy to the GPU overlaps the step"
_INPUT_CPU = "{loader} (on the CPU its workers share the cores with training: a few are enough)"
_STRAGGLER_GPU = (
    "the same work done slower: its GPU (clocks, heat, another process on it: nvidia-smi shows them) "
    "or an uneven share of the batch"
)
_STRAGGLER_CPU = (
    "the same work done slower: its cores (another process on them, or fewer of them for this rank) "
    "or an uneven share of the batch"
)
_STAGES_UNEVEN = (
    "its stage holds more of the model's work than the others: move layers to its neighbours "
    "(the split points), so that every stage takes the same time"
)
_COMPUTE_GPU = (
    "the device is the limit, as it should be: bf16 autocast and torch.compile make each step "
    "cheaper; a larger batch uses the device better"
)
_COMPUTE_CPU = (
    "the CPU's cores are the limit, as they should be: torch.compile makes each step cheaper, and a "
    "GPU far more"
)
_HOST = (
    "look at the loop between steps: .item() or printing each step, batches made by hand in Python "
    "(a DataLoader with workers makes them ahead), the loss outside the model"
)
_HOST_GPU = _HOST + "; on a GPU each .item() waits for every kernel queued before it"

ADVICE: tuple[Advice, ...] = (
    # input-bound: a rank waits for its batch (its DataLoader's __next__)
    Advice("input-bound", "DDP", None, _INPUT_GPU, _INPUT_CPU),
    Advice("input-bound", "FSDP", None, _INPUT_GPU, _INPUT_CPU),
    Advice("input-bound", "pipeline", None, _INPUT_GPU, _INPUT_CPU),
    Advice("input-bound", "TP", None, _INPUT_GPU, _INPUT_CPU),
    Advice("input-bound", "script's own", None, _INPUT_GPU, _INPUT_CPU),
    Advice("input-bound", "one process", None, _INPUT_GPU, _INPUT_CPU),
    # straggler: one rank slower at the same work, the others waiting for it
    Advice("straggler", "DDP", None, _STRAGGLER_GPU, _STRAGGLER_CPU),
    Advice("straggler", "FSDP", None, _STRAGGLER_GPU, _STRAGGLER_CPU),
    Advice("straggler", "pipeline", None, _STAGES_UNEVEN, _STAGES_UNEVEN),
    Advice(
        "straggler",
        "TP",
        None,
        "the same work done slower: its GPU (clocks, heat, another process on it: nvidia-smi shows them)",
        "the same work done slower: its cores (another process on them, or fewer of them for this rank)",
    ),
    Advice("straggler", "script's own", None, _STRAGGLER_GPU, _STRAGGLER_CPU),
    Advice("straggler", "one process", None, None, None),  # one rank: nobody waits for it
    # communication-bound: what backward did not hide (or a pipeline's waits) is the largest part
    Advice(
        "communication-bound",
        "DDP",
        "the gradients' all-reduce is not hidden behind backward",
        "fewer all-reduces a sample: a larger batch per rank, or gradient accumulation with no_sync(); "
        "DDP's bucket_cap_mb (25 by default) sets how soon each bucket starts",
        "fewer all-reduces a sample: a larger batch per rank, or gradient accumulation with no_sync(); "
        "DDP's bucket_cap_mb (25 by default) sets how soon each bucket starts",
    ),
    Advice(
        "communication-bound",
        "FSDP",
        "the gradients' reduce-scatter is not hidden behind backward",
        "fewer reduce-scatters a sample: a larger batch per rank, or gradient accumulation with "
        "set_requires_gradient_sync(False) (no_sync() under FSDP1) on all but the last micro-batch",
        "fewer reduce-scatters a sample: a larger batch per rank, or gradient accumulation with "
        "set_requires_gradient_sync(False) (no_sync() under FSDP1) on all but the last micro-batch",
    ),
    Advice(
        "communication-bound",
        "pipeline",
        "the stages wait for each other's activations and gradients (the pipeline's bubble and its sends)",
        "more micro-batches a step shrink the bubble (the demo's --microbatches); layers balanced over "
        "the stages keep any one from waiting for a slower neighbour",
        "more micro-batches a step shrink the bubble (the demo's --microbatches); layers balanced over "
        "the stages keep any one from waiting for a slower neighbour",
    ),
    # TP's all-reduces run inside every layer's forward and backward, and are counted there: what
    # is left after backward's graph is no collective of TP's to cut.
    Advice("communication-bound", "TP", "the ranks wait for each other after backward's graph", None, None),
    Advice(
        "communication-bound",
        "script's own",
        "the ranks wait for each other's collectives after backward's graph",
        "start each gradient's collective as soon as it is ready (a hook with async_op=True) and wait "
        "once before the optimizer, or wrap the model in DistributedDataParallel, which does",
        "start each gradient's collective as soon as it is ready (a hook with async_op=True) and wait "
        "once before the optimizer, or wrap the model in DistributedDataParallel, which does",
    ),
    Advice("communication-bound", "one process", "the time after backward's graph", None, None),
    # compute-bound: forward, backward and the optimizer are most of each step, on every rank
    Advice("compute-bound", "DDP", None, _COMPUTE_GPU, _COMPUTE_CPU),
    Advice("compute-bound", "FSDP", None, _COMPUTE_GPU, _COMPUTE_CPU),
    Advice("compute-bound", "pipeline", None, _COMPUTE_GPU, _COMPUTE_CPU),
    Advice("compute-bound", "TP", None, _COMPUTE_GPU, _COMPUTE_CPU),
    Advice("compute-bound", "script's own", None, _COMPUTE_GPU, _COMPUTE_CPU),
    Advice("compute-bound", "one process", None, _COMPUTE_GPU, _COMPUTE_CPU),
    # host-bound: the time outside the DataLoader, the model and the optimizer is most of each step
    Advice("host-bound", "DDP", None, _HOST_GPU, _HOST),
    Advice("host-bound", "FSDP", None, _HOST_GPU, _HOST),
    Advice("host-bound", "pipeline", None, _HOST_GPU, _HOST),
    Advice("host-bound", "TP", None, _HOST_GPU, _HOST),
    Advice(
        "host-bound",
        "script's own",
        "spent outside the DataLoader, the model and the optimizer (the script's own collectives among it)",
        _HOST_GPU + "; a gradient all-reduce the script calls after backward counts here: "
        "DistributedDataParallel overlaps it with backward",
        _HOST + "; a gradient all-reduce the script calls after backward counts here: "
        "DistributedDataParallel overlaps it with backward",
    ),
    Advice("host-bound", "one process", None, _HOST_GPU, _HOST),
)
_BY_KEY = {(a.verdict, a.job): a for a in ADVICE}


def row(verdict: str, job: Job | None) -> Advice | None:
    """The table's row for this verdict and job (None: a job nobody named)."""
    return _BY_KEY.get((verdict, job)) if job is not None else None


def says(verdict: str, job: Job | None, default: str) -> str:
    """What the verdict's part is for this job, or ``default`` (the verdict's own words)."""
    found = row(verdict, job)
    return found.says if found is not None and found.says else default


def advice(verdict: str, job: Job | None, device: Device | None, loader: str = "") -> str | None:
    """The change to try for this verdict on this job and device, or None where none applies. A
    device not known (no rank said it yet): only an advice that holds on both."""
    found = row(verdict, job)
    if found is None:
        return None
    if device is None:
        chosen = found.gpu if found.gpu == found.cpu else None
    else:
        chosen = found.gpu if device == "GPU" else found.cpu
    return chosen.format(loader=loader) if chosen is not None else None


def loader_words(workers: set[int]) -> str:
    """The input-bound advice's start, from what the starved ranks' DataLoaders said of their workers."""
    if workers == {0}:
        return "its DataLoader has num_workers=0: give it worker processes (num_workers=4, say)"
    if workers:
        return (
            f"its DataLoader's {max(workers)} worker(s) cannot keep up: more workers, or a cheaper "
            "__getitem__ (decode or transform once, ahead of training)"
        )
    return "load batches ahead of the step: DataLoader worker processes (num_workers)"


# What a script's rank says of where its batches were counted (the ``about`` event's batch_source,
# engine/rank/watch/model_root.py BATCH_SOURCE): the wrapper its job trains under.
_WRAPPED: tuple[tuple[str, Job], ...] = (
    ("the batches entering DistributedDataParallel", "DDP"),
    ("the batches entering FSDP", "FSDP"),
)


def job_of(sources: Iterable[str | None]) -> Job:
    """A user's script's job, from where its ranks counted their batches: under DDP or FSDP where
    every rank that said so agrees; otherwise its own (its own collectives, or none)."""
    said = {job for source in sources if source for start, job in _WRAPPED if source.startswith(start)}
    return said.pop() if len(said) == 1 else "script's own"


def device_of(devices: Iterable[str | None]) -> Device | None:
    """The ranks' device as the advice reads it: a GPU where any rank trains on CUDA, the CPU where
    they said cpu; None before any said."""
    said = {d.split(":")[0] for d in devices if d and d != "unknown"}
    if "cuda" in said:
        return "GPU"
    return "CPU" if "cpu" in said else None
