"""What the app reads of this machine, started once its first frame is up; both jobs only post messages.

- telemetry: the Sampler's own thread, every ``interval`` seconds (TelemetryUpdated);
- the topology: once, in a Textual worker thread (TopologyRead); NVML can take a while.

Before the first frame, NVML's and psutil's imports and these threads would only compete
with it for the one interpreter lock, so nothing here is imported with the app.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from textual.app import App

from mgpu_tui.app.messages import TelemetryUpdated, TopologyRead

if TYPE_CHECKING:
    from mgpu_tui.engine.machine.telemetry import Sampler, Snapshot


class MachineFeed:
    def __init__(
        self, app: App, interval: float, ranks: Callable[[], dict[int, tuple[int, str | None]]]
    ) -> None:
        self.app = app
        self.interval = interval
        self.ranks = ranks  # the rank processes to sample: the current run's
        self.sampler: Sampler | None = None

    def start_telemetry(self) -> None:
        from mgpu_tui.engine.machine.telemetry import Sampler

        self.sampler = Sampler(interval=self.interval, ranks=self.ranks)

        def on_sample(snapshot: Snapshot) -> None:
            self.app.post_message(TelemetryUpdated(snapshot))

        self.sampler.start(on_sample=on_sample)

    def read_topology(self) -> None:
        def work() -> None:
            from mgpu_tui.engine.machine import nvml
            from mgpu_tui.engine.machine.topology import from_nvml

            try:
                topology = from_nvml()
                reason = "" if topology is not None else nvml.status().detail
            except (nvml.NvmlCallFailed, nvml.GpuLost) as exc:
                topology, reason = None, f"NVML failed while reading it ({exc})"
            self.app.post_message(TopologyRead(topology, reason))

        self.app.run_worker(work, thread=True, exclusive=True, group="topology")

    def stop(self) -> None:
        if self.sampler is not None:
            self.sampler.stop()
