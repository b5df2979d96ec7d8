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
