"""The result of one diagnostic check, and of a whole ``mgpu-tui --check``.

A check passes, fails, is skipped (it cannot apply here: no GPU, say) or warns
(it passes, but something deserves a look). Only a failure fails the suite.
The JSON form is a contract, with a schema in ``docs/check-schema.json``:
numbers stay numbers, and every unit is in the key's name (``_bytes``, ``_s``,
``_GBps``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from enum import Enum

from mgpu_tui.engine.protocol.typed import build

SCHEMA = "mgpu-tui/check/1"


class Status(str, Enum):
    PASS = "pass"
    FAIL = "fail"
    SKIP = "skip"
    WARN = "warn"


@dataclass(frozen=True)
class CheckResult:
    name: str  # stable and machine-readable: "nvml", "collective:all_reduce", "smoke:ddp"
    status: Status
    detail: str  # one line for a person
    metrics: dict = field(default_factory=dict)
    seconds: float = 0.0

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "status": self.status.value,
            "detail": self.detail,
            "metrics": self.metrics,
            "seconds": round(self.seconds, 4),
        }


@dataclass(frozen=True)
class SweepPoint:
    """One size of the all_reduce sweep (nccl-tests' columns)."""

    size_bytes: int
    count: int
    type: str
    time_us: float
    algbw_GBps: float  # noqa: N815 (the JSON's name, unit in it)
    busbw_GBps: float  # noqa: N815


@dataclass(frozen=True)
class ScalingPoint:
    """One rank count of the ddp scaling check."""

    nproc: int
    samples_per_s: float
    speedup: float
    efficiency: float


@dataclass(frozen=True)
class _Sweep:
    points: list[SweepPoint]


@dataclass(frozen=True)
class _Scaling:
    points: list[ScalingPoint]


@dataclass(frozen=True)
class _CopyMatrix:
    matrix_GBps: list[list[float | None]]  # noqa: N815


# The level-3 checks' figures, each read from its metrics and checked as it is (protocol/typed.py:
# Invalid, a ValueError, names what is wrong): a rank's task wrote them.


def sweep_points(result: CheckResult) -> list[SweepPoint]:
    return build(_Sweep, result.metrics, result.name).points


def scaling_points(result: CheckResult) -> list[ScalingPoint]:
    return build(_Scaling, result.metrics, result.name).points


def copy_matrix(result: CheckResult) -> list[list[float | None]]:
    """GPU to GPU copy bandwidth in GB/s, a row per source (None: no path)."""
    return build(_CopyMatrix, result.metrics, result.name).matrix_GBps


@dataclass
class CheckReport:
    level: int
    nproc: int | None
    device: str
    results: list[CheckResult] = field(default_factory=list)
    started_at: float = field(default_factory=time.time)
    ended_at: float | None = None
    run_dir: str | None = None  # where the ranks' logs are, when ranks ran
    interrupted: bool = False
    shared_gpus: bool = False  # more ranks than GPUs (--share-gpus): gloo, and timings not a real box's
    model: str = "mlp"  # what the smoke and verify runs train (--model)

    def counts(self) -> dict[str, int]:
        return {s.value: sum(1 for r in self.results if r.status is s) for s in Status}

    @property
    def failed(self) -> bool:
        return any(r.status is Status.FAIL for r in self.results)

    def to_json(self) -> dict:
        ended = self.ended_at or time.time()
        return {
            "schema": SCHEMA,
            "level": self.level,
            "nproc": self.nproc,
            "device": self.device,
            "model": self.model,
            "shared_gpus": self.shared_gpus,
            "passed": not self.failed and not self.interrupted,
            "interrupted": self.interrupted,
            "counts": self.counts(),
            "started_at": self.started_at,
            "seconds": round(ended - self.started_at, 3),
            "run_dir": self.run_dir,
            "checks": [r.to_json() for r in self.results],
        }
