"""How a failure is told: the one shape every part uses for it (a run's summary, the CLI's and the
app's root cause, a node's record of how it failed, a comparison's row), and which failures only
echo another's. Standard library only: it sits at the bottom of the engine's layers, where the
nodes' watch and a run's root cause both reach it (engine/run/causes/rootcause.py finds the cause itself).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Estimate:
    """A change that would fit, as estimated from an out-of-memory's figures (never measured)."""

    change: str  # "micro-batch / 4, 4 accumulation steps", "mixed precision (bf16 autocast)", ...
    peak_bytes: int  # the estimated peak with it


@dataclass(frozen=True)
class OutOfMemory:
    """A rank's out-of-memory, as it said it (engine/run/causes/out_of_memory.py reads and checks it)."""

    kind: str  # "cpu" (torch's CPU allocator), "cuda", "oom killer" (the kernel's)
    phase: str | None  # forward, backward, optimizer, data, or between the step's parts
    step: int | None  # the step it was in
    memory_parts: tuple[int, ...] | None  # parameters, buffers, gradients, optimizer at that moment
    capacity_bytes: int | None
    capacity_of: str | None  # "its address-space limit (RLIMIT_AS)", "the GPU's memory", ...
    request_bytes: int | None  # the allocation that failed
    in_use_bytes: int | None  # what it held then (against its capacity)
    would_fit: tuple[Estimate, ...] = ()  # estimates, each under the capacity


@dataclass(frozen=True)
class RootCause:
    rank: int | None
    exit_code: int | None  # as Python reports it: negative for a signal
    signal: str | None  # "SIGSEGV", when a signal ended the rank
    message: str
    traceback: str
    hint: str | None = None  # what the error means and what to try (HINTS), when it is a known one
    host: str | None = None  # the rank's host, in a job over several nodes
    # The message is the whole verdict (a lost host, a rendezvous that never completed): no "who" before it.
    verdict: bool = False
    # What kind of failure, where its maker knows (one of CAUSE_KINDS); :func:`cause_kind` tells the rest.
    kind: str | None = None
    # A trainer's failure (a process of a command that trained with no process group): its number.
    trainer: int | None = None
    out_of_memory: OutOfMemory | None = None  # where it ran out of memory: what filled it, what would fit

    def headline(self) -> str:
        """One line: who failed first, how, and what it said (the CLI, the app and compare use it)."""
        if self.verdict:
            return self.message
        who = "the launcher" if self.rank is None else f"rank {self.rank}"
        who = f"trainer {self.trainer}" if self.trainer is not None else who
        who += f" on {self.host}" if self.host else ""
        how = self.signal or (f"exit code {self.exit_code}" if self.exit_code is not None else None)
        return f"{who} failed first ({how}): {self.message}" if how else f"{who}: {self.message}"

    def describe(self) -> str:
        """The headline, the hint, and below them the traceback (or the stacks, for a stall), its
        user's frames only (users_frames: none of the launchers' or of mgpu-tui's watch)."""
        text = self.headline() + (f"\nhint: {self.hint}" if self.hint else "")
        frames = users_frames(self.traceback)
        return text + (f"\n{frames.rstrip()}" if frames.strip() else "")

    def to_json(self) -> dict:
        document = asdict(self)
        if self.kind is None:  # (a cause whose kind is told by its shape: written as before kinds)
            del document["kind"]
        if self.out_of_memory is None:  # (only an out-of-memory's: every other reads as before)
            del document["out_of_memory"]
        if self.trainer is None:  # a trainer's failure alone: every other reads as before
            del document["trainer"]
        return document


# The kinds of failure, a fixed set (the metrics' root cause, docs/metrics.md): a stall, a full disk,
# another node (or the rendezvous), a rank that finished its work and died at exit, out of memory, a
# signal, a rank's error or exit code, the launcher's own failure.
CAUSE_KINDS = (
    "stall",
    "disk_full",
    "node",
    "finished_then_died",
    "out_of_memory",
    "signal",
    "error",
    "launcher",
)
_OUT_OF_MEMORY = re.compile(r"CUDA out of memory|OutOfMemoryError|\bMemoryError\b")


def cause_kind(cause: RootCause) -> str:
    """The failure's kind, one of CAUSE_KINDS: its maker's word where it said one (a kind read back
    from a file that is none of them is not believed), else from its shape."""
    if cause.kind in CAUSE_KINDS:
        return cause.kind
    if _OUT_OF_MEMORY.search(f"{cause.message}\n{cause.traceback[-20_000:]}"):
        return "out_of_memory"
    if "Traceback (most recent call last)" in cause.traceback[:20_000]:
        return "error"  # the rank raised: its exception is the story, however its process ended after
    if cause.signal:
        return "signal"
    return "launcher" if cause.rank is None else "error"


# What a rank says when it is the casualty of another rank's failure, not its cause: its peer went
# away, its process group was aborted under it, or it timed out waiting for a peer that hung. One
# pattern for torchrun's order of failures (_first_cause), the nodes' (is_consequence) and the hint.
PEER_LOST = re.compile(
    r"Connection (closed|reset) by peer|remote process exited|Broken pipe|"
    r"ProcessGroup\w* (is )?(aborted|shut ?down)|NCCL communicator was aborted|"
    r"Watchdog caught collective operation timeout|NCCL watchdog",
    re.I,
)


def is_consequence(cause: RootCause) -> bool:
    """Whether this failure only echoes another's: the rank lost a peer (on several nodes, the
    first failure is then on another node, and that node's own cause is the one to tell)."""
    return bool(PEER_LOST.search(f"{cause.message}\n{cause.traceback[-20_000:]}"))


# Frames a traceback passes through on its way to the user's code, which say nothing of the error:
# torch elastic's @record wrapper, mp.spawn's, and mgpu-tui's own watch (its wrappers of torch, in
# engine/rank/watch/, wherever a module of it moves there) and the bootstrap that runs the script.
NOT_THE_USERS = re.compile(
    r'^  File ".*(/torch/distributed/elastic/|/torch/multiprocessing/spawn\.py'
    r"|/engine/rank/(watch/[\w/]+|bootstrap)\.py)"
)


def users_frames(traceback: str) -> str:
    """``traceback`` without the frames of the launchers and of the watch around the user's code
    (a frame: its ``  File`` line and the indented lines under it); the rest as it was."""
    kept, skipping = [], False
    for line in traceback.splitlines(keepends=True):
        if line.startswith('  File "'):
            skipping = bool(NOT_THE_USERS.match(line))
        elif not line.startswith("    "):
            skipping = False
        if not skipping:
            kept.append(line)
    return "".join(kept)
