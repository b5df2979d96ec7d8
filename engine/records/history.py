"""The past runs of a folder, read back from their files: newest first, the broken ones said as such.

A run directory holds ``spec.json`` from the start and ``summary.json`` once it ended (the
protocol/rundir.py layout). Each is read with a bound and trusted for nothing but what it says;
a folder that is not a run, or a run whose files are half-written or foreign, is listed as
broken with the reason, never fatal. A run with a spec and no summary is *running* while the
process that follows it holds its lock (run/monitor.py), *cut off* once that process is gone
without writing one (killed, the machine restarted), and *unfinished* when it has no lock to tell
by (made by an mgpu-tui from before the lock).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from mgpu_tui.engine.protocol.rundir import read_capped
from mgpu_tui.engine.run.monitor import is_followed
from mgpu_tui.engine.run.summary import RunSummary

MAX_SPEC_BYTES = 1 << 20
MAX_SUMMARY_BYTES = 8 << 20
MAX_RUNS = 10_000  # a folder with more entries is read up to this many, the newest by name


class RecordError(ValueError):
    """A run directory that cannot be used as asked (opened, compared): one sentence for the user."""


@dataclass(frozen=True)
class RunRecord:
    path: str
    created_at: float | None  # Unix time, from spec.json
    what: str  # the mode, or the user's script or module
    world_size: int | None
    nnodes: int | None
    status: str  # ok, failed, interrupted, running, cut off, unfinished, broken
    summary: RunSummary | None = None
    reason: str | None = None  # why it is broken

    def to_json(self) -> dict:
        s = self.summary
        return {
            "path": self.path,
            "created_at": self.created_at,
            "what": self.what,
            "world_size": self.world_size,
            "nnodes": self.nnodes,
            "status": self.status,
            "reason": self.reason,
            "duration_s": s.duration_s if s else None,
            "steps": s.steps if s else None,
            "samples_per_s": s.samples_per_s if s else None,
            "final_loss": s.final_loss if s else None,
            "root_cause": s.root_cause.headline() if s and s.root_cause else None,
        }


def read_run(path: Path) -> RunRecord:
    """One run directory as a record (never raises for what is in the folder)."""
    # One node's files: spec.json, or spec-node<N>.json where the nodes of a job share a folder.
    suffix = ""
    if not (path / "spec.json").exists():
        nodes = sorted(path.glob("spec-node*.json"))
        suffix = nodes[0].name[len("spec") : -len(".json")] if nodes else ""
    spec_path, summary_path = path / f"spec{suffix}.json", path / f"summary{suffix}.json"
    try:
        document = json.loads(read_capped(spec_path, MAX_SPEC_BYTES))
        spec = document["spec"]
        what = str(spec.get("script") or spec.get("module") or spec["mode"])
        created = float(document["created_at"])
        world, nnodes = int(spec["world_size"]), int(spec.get("nnodes", 1))
    except FileNotFoundError:
        return _broken(path, "no spec.json: not a run directory")
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        return _broken(path, f"spec.json unreadable ({_why(exc)})")
    if not summary_path.exists():
        lock = path / f"monitor{suffix}.lock"
        status = "unfinished" if not lock.exists() else "running" if is_followed(lock) else "cut off"
        return RunRecord(str(path), created, what, world, nnodes, status)
    try:
        summary = RunSummary.from_json(json.loads(read_capped(summary_path, MAX_SUMMARY_BYTES)))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        return RunRecord(
            str(path), created, what, world, nnodes, "broken", reason=f"summary.json unreadable ({_why(exc)})"
        )
    return RunRecord(str(path), created, what, world, nnodes, summary.status, summary)


def read_spec(path: Path) -> tuple[dict, dict, int | None]:
    """(the resolved spec, the machine it ran on, the node) of a run directory: spec.json, or the
    first node's spec-node<N>.json where nodes share the folder. RecordError if unreadable."""
    spec_path, node = path / "spec.json", None
    try:
        if not spec_path.exists():
            spec_path = min(path.glob("spec-node*.json"))
            node = int(spec_path.stem.removeprefix("spec-node"))
        document = json.loads(read_capped(spec_path, MAX_SPEC_BYTES))
        spec, machine = document["spec"], document.get("machine") or {}
        if not isinstance(spec, dict) or not isinstance(machine, dict):
            raise TypeError("not an object")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise RecordError(f"{path}: its spec.json is unreadable ({type(exc).__name__}).") from None
    return spec, machine, node


def list_runs(root: Path) -> list[RunRecord]:
    """Every run directory under ``root``, newest first (by its start, else by its name)."""
    try:
        names = sorted((e.name for e in os.scandir(root) if e.is_dir(follow_symlinks=False)), reverse=True)
    except FileNotFoundError:
        return []
    records = [read_run(root / name) for name in names[:MAX_RUNS]]
    return sorted(records, key=lambda r: (r.created_at or 0.0, r.path), reverse=True)


def _broken(path: Path, reason: str) -> RunRecord:
    return RunRecord(str(path), None, "?", None, None, "broken", reason=reason)


def _why(exc: BaseException) -> str:
    if isinstance(exc, OSError):
        return exc.strerror or type(exc).__name__
    return f"{type(exc).__name__}: {str(exc)[:80]}"
