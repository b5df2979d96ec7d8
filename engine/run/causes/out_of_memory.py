"""An out-of-memory named: what a rank said of it (rank/watch/memory/failure.py), checked as read,
and what would fit, estimated from those figures alone (most run out at step 1, before any step was
observed). Each estimate is labelled one, and shown only where it comes under the capacity:

- the base: the address space as its first optimizer was made (CPU, step 1: the model built,
  nothing trained yet), else what the rank held;
- the activations: what the step had grown by when it failed (in use, with the allocation that
  failed, less the base); where it failed in the forward, four times that (the rest of the forward,
  the loss and the backward's gradients of them were never seen: assumed three times as much
  again), in the backward twice;
- still to come at step 1: the gradients (as large as the parameters) and, where the optimizer held
  nothing yet, Adam's two moments (twice the parameters: the largest of the common optimizers);
- a micro-batch of 1/k with k accumulation steps: the activations over k (the smallest k that fits);
  over W ranks, ZeRO-1 (the optimizer state over W), ZeRO-2 (and the gradients) and FSDP (and the
  parameters). Activation checkpointing and mixed precision are not estimated: what they save
  depends on the model's layers and on which operations autocast keeps in float32 (a loss, a
  softmax), which the failure does not show.
"""

from __future__ import annotations

import dataclasses
import os
import re

from mgpu_tui.engine.protocol.causes import Estimate, OutOfMemory, RootCause
from mgpu_tui.engine.protocol.events import MAX_BYTES, MEMORY_PARTS

KINDS = {"cpu": "torch's CPU allocator", "cuda": "CUDA's allocator", "oom killer": "the kernel's OOM killer"}
PHASES = ("forward", "backward", "comm", "optimizer", "data", "host", "between the step's parts")


def fmt_bytes(n: int | None) -> str:
    """Bytes as the console writes them (mgpu_tui/console.py's, which the engine cannot import)."""
    value = float(n or 0)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


def _bytes(raw: dict, key: str) -> int | None:
    value = raw.get(key)
    ok = isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_BYTES
    return value if ok else None


def _text(raw: dict, key: str) -> str | None:
    value = raw.get(key)
    return value[:120] if isinstance(value, str) else None


def read(raw: dict, world: int | None = None) -> OutOfMemory | None:
    """The rank's figures checked (a rank is anyone's code: a figure of the wrong type is none),
    with what would fit; None for a kind it does not know."""
    kind = raw.get("kind")
    if kind not in KINDS:
        return None
    parts_raw = raw.get("memory_parts")
    parts = None
    if isinstance(parts_raw, dict):
        figures = [_bytes(parts_raw, p) for p in MEMORY_PARTS]
        parts = tuple(f for f in figures if f is not None) if None not in figures else None
    phase = raw.get("phase") if raw.get("phase") in PHASES else None
    step = (
        raw.get("step")
        if isinstance(raw.get("step"), int) and not isinstance(raw.get("step"), bool)
        else None
    )
    oom = OutOfMemory(
        str(kind), phase, step, parts, _bytes(raw, "capacity_bytes"), _text(raw, "capacity_of"),
        _bytes(raw, "request_bytes"), _bytes(raw, "in_use_bytes"),
    )  # fmt: skip
    return OutOfMemory(**{**oom.__dict__, "would_fit": estimates(oom, _bytes(raw, "base_bytes"), world)})


def estimates(oom: OutOfMemory, base_bytes: int | None, world: int | None) -> tuple[Estimate, ...]:
    """What would fit, by the module docstring's rules (empty where the figures do not allow it)."""
    if oom.capacity_bytes is None or oom.in_use_bytes is None or oom.memory_parts is None:
        return ()
    params, buffers, grads, state = oom.memory_parts
    base = base_bytes if base_bytes is not None else params + buffers + grads + state
    activations = max(0, oom.in_use_bytes + (oom.request_bytes or 0) - base)
    activations *= {"forward": 4, "backward": 2}.get(oom.phase or "", 1)
    grads_to_come = max(0, params - grads)
    state_to_come = 2 * params if state == 0 else 0
    fixed = base + grads_to_come + state_to_come
    found: list[Estimate] = []
    for k in (2, 4, 8, 16):
        if fixed + activations // k <= oom.capacity_bytes:
            found.append(Estimate(f"micro-batch / {k}, {k} accumulation steps", fixed + activations // k))
            break
    if world is not None and world > 1:
        optimizer, gradients = state + state_to_come, grads + grads_to_come
        shed = optimizer - optimizer // world
        found.append(Estimate(f"ZeRO-1 over {world} ranks", fixed + activations - shed))
        shed += gradients - gradients // world
        found.append(Estimate(f"ZeRO-2 over {world} ranks", fixed + activations - shed))
        shed += params - params // world
        found.append(Estimate(f"FSDP over {world} ranks", fixed + activations - shed))
    return tuple(e for e in found if e.peak_bytes <= oom.capacity_bytes)


def describe(oom: OutOfMemory) -> str:
    """The out-of-memory in words: where, against what, what filled it, and what would fit."""
    where = f"in the {oom.phase}" if oom.phase in PHASES[:5] else (oom.phase or "")
    step = f" of step {oom.step}" if oom.step is not None and oom.phase in PHASES[:5] else ""
    line = f"{KINDS[oom.kind]} ran out of memory {where}{step}".replace("  ", " ")
    if oom.capacity_bytes is not None:
        line += f": {oom.capacity_of or 'its capacity'} {fmt_bytes(oom.capacity_bytes)}"
        line += f", {fmt_bytes(oom.in_use_bytes)} in use" if oom.in_use_bytes is not None else ""
    if oom.request_bytes is not None:
        line += f", asking for {fmt_bytes(oom.request_bytes)} more"
    if oom.memory_parts is not None:
        held = ", ".join(f"{n} {fmt_bytes(b)}" for n, b in zip(MEMORY_PARTS, oom.memory_parts))
        line += f". It held {held}"
    if oom.would_fit:
        fits = "; ".join(f"{e.change}: about {fmt_bytes(e.peak_bytes)}" for e in oom.would_fit)
        line += f". Would fit (estimates, from these figures alone; docs/your-script.md): {fits}"
    elif oom.capacity_bytes is not None:
        line += ". No change estimated from these figures would fit"
    return line + "."


def _memory_cgroup() -> tuple[str, str, str] | None:
    """This process's memory cgroup: (its folder, its events file, its limit file), v2 or v1."""
    try:
        with open("/proc/self/cgroup", "rb") as f:
            lines = f.read(16 << 10).decode(errors="replace").splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if "memory" in controllers.split(","):  # v1: its own hierarchy
            folder = os.path.join("/sys/fs/cgroup/memory", path.lstrip("/"))
            return folder, "memory.oom_control", "memory.limit_in_bytes"
    for line in lines:
        if line.startswith("0::"):
            folder = os.path.join("/sys/fs/cgroup", line[3:].lstrip("/"))
            return folder, "memory.events", "memory.max"
    return None


def _read_small(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            return f.read(4096).decode(errors="replace")
    except OSError:
        return None


def oom_kills() -> int | None:
    """The kernel's OOM kills so far in this process's memory cgroup (which the run's ranks share),
    as its ``memory.events`` (or v1's ``memory.oom_control``) counts them; None where unreadable."""
    cgroup = _memory_cgroup()
    text = _read_small(os.path.join(cgroup[0], cgroup[1])) if cgroup else None
    found = re.search(r"^oom_kill (\d+)$", text or "", re.M)
    return int(found[1]) if found else None


def if_killed(cause: RootCause | None, before: int | None) -> RootCause | None:
    """A SIGKILL that came with more OOM kills in the run's cgroup than before it: the kernel's OOM
    killer, named (not an unexplained SIGKILL), with the cgroup's limit."""
    if cause is None or cause.signal != "SIGKILL" or before is None:
        return cause
    now = oom_kills()
    if now is None or now <= before:
        return cause
    cgroup = _memory_cgroup()
    limit_text = (_read_small(os.path.join(cgroup[0], cgroup[2])) or "").strip() if cgroup else ""
    limit = int(limit_text) if limit_text.isdigit() and int(limit_text) < MAX_BYTES else None
    oom = OutOfMemory("oom killer", None, None, None, limit, "its cgroup's memory limit", None, None)
    where = f" (its cgroup's memory limit {fmt_bytes(limit)})" if limit is not None else ""
    message = f"killed by the kernel's OOM killer{where}: {cause.message}"
    hint = (
        f"the kernel's OOM killer ended it: its cgroup counted {now - before} OOM kill(s) during the run "
        f"({cgroup[1] if cgroup else 'memory.events'}). The host's memory, not a GPU's, ran out: fewer "
        "DataLoader workers, a smaller batch, or a higher limit."
    )
    return dataclasses.replace(cause, message=message, hint=hint, out_of_memory=oom)
