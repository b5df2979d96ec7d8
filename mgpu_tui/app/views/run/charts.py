"""The Run view's two charts of the run itself, throughput and loss: the latest steps that fit, or
the whole run (thinned) while ``whole`` is on (the view's w)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.reactive import reactive

from mgpu_tui.app.widgets.chart import Chart
from mgpu_tui.console import fmt_loss, fmt_rate

WHOLE = "whole run"  # what the charts say while they show it (w: the latest steps)

Series = tuple[list, list, list]  # (steps, samples/s, losses), a loss None where none was known


class RunCharts(Vertical):
    """Throughput and loss over the steps; ``whole``: the whole run, else the latest steps."""

    whole: reactive[bool] = reactive(True, init=False)  # the charts start with the whole run

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._latest: Series = ([], [], [])
        self._run: Series = ([], [], [])  # the whole run, thinned

    def compose(self) -> ComposeResult:
        yield Chart("throughput (samples/s)", fmt_rate, whole=WHOLE, smoothed=True, id="throughput")
        yield Chart("loss (global batch)", fmt_loss, whole=WHOLE, smoothed=True, id="loss")

    def show(self, latest: Series, whole: Series | None = None) -> None:
        """The run's series now: the latest steps, and the whole run (thinned; the latest if None)."""
        self._latest, self._run = latest, whole or latest
        self._draw()

    def watch_whole(self, whole: bool) -> None:
        for chart in self.query(Chart):
            chart.whole = WHOLE if whole else None
        self._draw()

    def _draw(self) -> None:
        if not self.is_mounted:
            return
        throughput, loss = self.query_one("#throughput", Chart), self.query_one("#loss", Chart)
        steps, rates, losses = self._run if self.whole else self._latest
        throughput.update(rates, steps)
        known = [(s, x) for s, x in zip(steps, losses) if x is not None]
        loss.update([x for _, x in known], [s for s, _ in known])
