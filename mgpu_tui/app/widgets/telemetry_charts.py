"""The machine during a recorded run, over the whole run: host CPU and memory, and one GPU's
memory, utilisation and power (``g`` shows the next GPU). Fed from the run's telemetry.jsonl."""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.containers import Horizontal

from mgpu_tui.app.widgets.chart import Chart
from mgpu_tui.console import fmt_bytes, fmt_percent

if TYPE_CHECKING:
    from textual.app import ComposeResult

    from mgpu_tui.engine.records.telemetry_read import TelemetrySeries


def _watts(value: float) -> str:
    return f"{value:.0f} W"


def known(values: list[float | None]) -> list[float]:
    """The samples that hold a value (a field the machine could not tell is left out, not zero)."""
    return [v for v in values if v is not None]


PERCENT = (0.0, 100.0)  # a share of all the cores, or of a GPU's time: the whole height is 100%


class TelemetryCharts(Horizontal):
    DEFAULT_CSS = """
    TelemetryCharts {
        height: 4;
        padding: 0 1;
    }
    TelemetryCharts.empty {
        display: none;
    }
    TelemetryCharts Chart {
        width: 1fr;
        height: 4;
        margin-right: 2;
    }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(classes="empty", **kwargs)  # until a run's telemetry comes
        self.gpu = 0  # the GPU shown, by its index in the run's telemetry
        self._series: TelemetrySeries | None = None

    def compose(self) -> ComposeResult:
        yield Chart("host CPU", fmt_percent, whole="whole run", id="tm-cpu", scale=PERCENT)
        yield Chart("host memory", fmt_bytes, whole="whole run", id="tm-mem")
        yield Chart("GPU memory", fmt_bytes, whole="whole run", id="tm-gpu-mem")
        yield Chart("GPU util", fmt_percent, whole="whole run", id="tm-gpu-util", scale=PERCENT)
        yield Chart("GPU power", _watts, whole="whole run", id="tm-gpu-power")

    def show(self, series: TelemetrySeries) -> None:
        self._series = series
        self.set_class(not series.t, "empty")
        self.query_one("#tm-cpu", Chart).update(known(series.host_cpu))
        memory = self.query_one("#tm-mem", Chart)
        memory.scale = (0.0, series.host_mem_total) if series.host_mem_total else None  # of all of it
        memory.update(known(series.host_mem))
        gpus = sorted(series.gpus)
        for chart_id in ("#tm-gpu-mem", "#tm-gpu-util", "#tm-gpu-power"):
            self.query_one(chart_id, Chart).display = bool(gpus)
        if not gpus:
            return
        if self.gpu not in series.gpus:
            self.gpu = gpus[0]
        track = series.gpus[self.gpu]
        label = f"GPU {self.gpu}" + (f" of {len(gpus)} (g: next)" if len(gpus) > 1 else "")
        for chart_id, key, name in (
            ("#tm-gpu-mem", "mem", "memory"),
            ("#tm-gpu-util", "util", "util"),
            ("#tm-gpu-power", "power", "power"),
        ):
            chart = self.query_one(chart_id, Chart)
            chart.title = f"{label} {name}"
            if key == "mem":
                total = series.gpu_mem_total.get(self.gpu)
                chart.scale = (0.0, total) if total else None
            chart.update(known(track[key]))

    def clear(self) -> None:
        """A new run: nothing shown until its telemetry comes."""
        self._series = None
        self.add_class("empty")

    def next_gpu(self) -> None:
        if self._series and self._series.gpus:
            gpus = sorted(self._series.gpus)
            self.gpu = gpus[(gpus.index(self.gpu) + 1) % len(gpus)] if self.gpu in gpus else gpus[0]
            self.show(self._series)
