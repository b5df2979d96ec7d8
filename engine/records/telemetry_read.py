"""A run's recorded telemetry read back: its telemetry.jsonl as series over time (the app's charts of
a finished or followed run), and a node's host as its own file last said it. A rank can write
these files: every figure is checked, and none beyond what a machine gives."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

MAX_TELEMETRY_POINTS = 20_000  # past this, every other point is dropped: the whole run stays in view


MAX_TELEMETRY_LINE = 64 * 1024


@dataclass
class TelemetrySeries:
    """The run's telemetry.jsonl as series over time: one value (or None) a sample each."""

    t: list[float] = field(default_factory=list)
    host_cpu: list[float | None] = field(default_factory=list)  # percent of all cores
    host_mem: list[float | None] = field(default_factory=list)  # bytes used
    gpus: dict[int, dict[str, list[float | None]]] = field(default_factory=dict)  # i -> mem, util, power
    host_mem_total: float | None = None  # bytes, as the latest sample said: the charts' fixed scale
    gpu_mem_total: dict[int, float] = field(default_factory=dict)  # i -> bytes, likewise
    ended: str | None = None  # the file's own last word, when recording stopped at its cap

    def add(self, line: dict) -> None:
        t = _number(line.get("t"))
        if t is None:
            return
        if isinstance(line.get("end"), str):
            self.ended = line["end"][:200]
            return
        raw_host = line.get("host")
        host: dict = raw_host if isinstance(raw_host, dict) else {}
        gpus = {g.get("i"): g for g in line.get("gpus") or () if isinstance(g, dict)}
        seen = [i for i in gpus if isinstance(i, int) and not isinstance(i, bool) and 0 <= i < 64]
        for i in dict.fromkeys([*self.gpus, *seen]):  # each GPU once, in the order first seen
            track = self.gpus.setdefault(
                i, {"mem": [None] * len(self.t), "util": [None] * len(self.t), "power": [None] * len(self.t)}
            )
            g = gpus.get(i, {})
            track["mem"].append(_number(g.get("mem_used")))
            if (total := _number(g.get("mem_total"))) is not None and total > 0:
                self.gpu_mem_total[i] = total
            track["util"].append(_number(g.get("util")))
            track["power"].append(_number(g.get("power_w")))
        self.t.append(t)
        self.host_cpu.append(_number(host.get("cpu")))
        self.host_mem.append(_number(host.get("mem_used")))
        if (total := _number(host.get("mem_total"))) is not None and total > 0:
            self.host_mem_total = total
        if len(self.t) > MAX_TELEMETRY_POINTS:
            self._halve()

    def copy(self) -> TelemetrySeries:
        return TelemetrySeries(
            list(self.t),
            list(self.host_cpu),
            list(self.host_mem),
            {i: {k: list(v) for k, v in track.items()} for i, track in self.gpus.items()},
            host_mem_total=self.host_mem_total,
            gpu_mem_total=dict(self.gpu_mem_total),
            ended=self.ended,
        )

    def _halve(self) -> None:
        columns: list[list[Any]] = [self.t, self.host_cpu, self.host_mem]
        columns += [s for track in self.gpus.values() for s in track.values()]
        for series in columns:
            del series[1::2]


MAX_FIGURE = 1e18  # of a telemetry reading (bytes, percent, watts, seconds): beyond it, none is meant


def _number(value) -> float | None:
    """A reading as a float; None for anything else, or for a figure no machine gives (1e308 would
    overflow whatever draws it)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value) if abs(value) <= MAX_FIGURE else None


@dataclass(frozen=True)
class NodeMachine:
    """A node's host as its own telemetry last said it (``telemetry-node<N>.jsonl``, which each
    node writes into the folder the nodes share): what the app shows beside the node's ranks."""

    cpu_percent: float | None
    mem_used_bytes: float | None
    gpu_util_percent: float | None  # the mean over its GPUs; None without GPUs

    @classmethod
    def of(cls, line: dict) -> NodeMachine:
        """From one telemetry line (a rank can write it: every figure checked, None if not one)."""
        raw = line.get("host")
        host: dict = raw if isinstance(raw, dict) else {}
        gpus = [g for g in line.get("gpus") or () if isinstance(g, dict)][:64]
        utils = [u for g in gpus if (u := _number(g.get("util"))) is not None]
        return cls(
            _number(host.get("cpu")),
            _number(host.get("mem_used")),
            sum(utils) / len(utils) if utils else None,
        )
