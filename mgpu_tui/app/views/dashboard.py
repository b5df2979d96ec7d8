"""The dashboard: the host, every GPU, and the current run's rank processes.

With no GPU to show, its middle says what the app can do here, with the keys, and shows the
host's own layout (sockets, NUMA nodes, cores, memory per node) instead of GPU cards.
"""

from __future__ import annotations

import collections
from typing import TYPE_CHECKING

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, VerticalScroll
from textual.widget import Widget
from textual.widgets import DataTable, Static

from mgpu_tui.app.messages import TelemetryUpdated
from mgpu_tui.app.widgets.bars import bar
from mgpu_tui.app.widgets.chart import Chart
from mgpu_tui.app.widgets.gpu_card import GpuCard
from mgpu_tui.app.widgets.telemetry_charts import PERCENT
from mgpu_tui.app.widgets.text_panel import TextPanel
from mgpu_tui.console import fmt_bytes, fmt_percent, plain
from mgpu_tui.reports.host import layout_lines

if TYPE_CHECKING:  # psutil loads with the sampler, after the first frame
    from mgpu_tui.engine.machine.host_layout import HostLayout
    from mgpu_tui.engine.machine.telemetry import Snapshot

GUIDE = (
    ("r", "run a mode, watch every rank, read its demo's code (v)"),
    ("c", "compare modes on the same model, data and global batch"),
    ("t", "the topology: how GPUs talk, or this host's layout"),
    ("h", "past runs; Enter opens one, finished or still going"),
    ("?", "every view and key explained"),
)


def first_steps(layout: HostLayout) -> Text:
    """What a first screen with no GPU says: what can be done here, the keys, and the host."""
    text = Text("What you can do here: every mode runs, on the CPU with gloo.\n\n", style="bold")
    for key, what in GUIDE:
        text.append(f"  {key}  ", style="bold reverse")
        text.append(f"  {what}\n")
    text.append("\nThis host: ", style="bold")
    text.append("\n  ".join(layout_lines(layout)))
    return text


HISTORY = 60
HOST_HISTORY = 600  # samples of the host kept for its charts (ten minutes at the usual one a second)
HISTORY_MIN_ROWS = 34  # the dashboard's rows under which the host's charts are left out (80x24)


class Dashboard(Widget):
    DEFAULT_CSS = """
    Dashboard {
        height: 1fr;
    }
    #banner {
        background: $warning 30%;
        color: $text;
        padding: 0 1;
        text-style: bold;
    }
    #host {
        padding: 0 1;
        height: 3;
        border-bottom: solid $primary-background;
    }
    #gpus {
        height: 1fr;
    }
    #first-steps {
        height: auto;
        padding: 1 1 0 1;
        display: none;
    }
    /* With no GPU: the host's CPU and memory over the last minutes fill the room the cards would
       (at 160x50 the guide alone left some 28 rows empty); shown where they get rows enough. */
    #host-history {
        height: 1fr;
        padding: 1 1 0 1;
        display: none;
    }
    #host-history Chart {
        width: 1fr;
        height: 1fr;
        margin-right: 2;
    }
    .section-title {
        text-style: bold;
        padding: 0 1;
    }
    #rank-processes {
        height: auto;
        max-height: 12;
    }
    """

    def __init__(self, host_layout: HostLayout | None = None, **kwargs) -> None:
        super().__init__(**kwargs)
        self.host_layout = host_layout  # the host's layout: read on the first sample without a GPU
        self._util: dict[str, collections.deque[float]] = {}
        self._host_cpu: collections.deque[float] = collections.deque(maxlen=HOST_HISTORY)
        self._host_mem: collections.deque[float] = collections.deque(maxlen=HOST_HISTORY)
        self._no_gpu = False  # as the last sample said
        self._rank_rows: list[tuple] | None = None
        self._banner: str | None = ""

    def compose(self) -> ComposeResult:
        yield Static("", id="banner")
        yield TextPanel("waiting for the first sample…", id="host")
        yield VerticalScroll(id="gpus")
        yield TextPanel("", id="first-steps")
        with Horizontal(id="host-history"):
            yield Chart("host CPU", fmt_percent, unit="sample", id="host-cpu", scale=PERCENT)
            yield Chart("host memory", fmt_bytes, unit="sample", id="host-mem")
        yield Static("Rank processes of the current run", id="ranks-title", classes="section-title")
        table: DataTable[str] = DataTable(id="rank-processes", cursor_type="none")
        table.add_columns("rank", "pid", "CPU %", "memory (RSS)", "threads", "GPU")
        yield table

    def on_telemetry_updated(self, message: TelemetryUpdated) -> None:
        self.show(message.snapshot)

    def show(self, snap: Snapshot) -> None:
        if not self.query("#host"):
            return  # a late sample while the app closes: its widgets are already gone
        text = None
        if not snap.nvml.ok:
            text = f"No NVIDIA GPU here ({snap.nvml.detail}): ranks run on the CPU with gloo."
        if text != self._banner:  # set only on change: each update re-lays out the screen
            self._banner = text
            banner = self.query_one("#banner", Static)
            banner.display = text is not None
            banner.update(Text(plain(text or "")))  # NVML's words, not markup
        host = snap.host
        n = len(host.cpu_percent)
        if None in host.cpu_percent:  # the first sample: CPU use needs two readings
            cpu_text = Text.assemble(bar(None), "  ...   ")
            cores = "measuring (the figures come with the next sample)"
        else:
            cpu = sum(c for c in host.cpu_percent if c is not None) / max(1, n)
            cpu_text = Text.assemble(bar(cpu / 100), f" {cpu:3.0f}%   ")
            cores = "  ".join(f"{c:3.0f}%" for c in host.cpu_percent[:32])
            self._host_cpu.append(cpu)
        self.query_one("#host", TextPanel).update(
            Text.assemble(
                ("Host  ", "bold"),
                f"CPU {n} cores ",
                cpu_text,
                "memory ",
                bar(host.memory_used / host.memory_total),
                f" {fmt_bytes(host.memory_used)} / "
                f"{fmt_bytes(host.memory_total)}   load {host.load_avg[0]:.2f} {host.load_avg[1]:.2f} "
                f"{host.load_avg[2]:.2f}\n      cores {cores}",
            )
        )
        self._host_mem.append(host.memory_used)
        self.query_one("#host-mem", Chart).scale = (
            (0.0, float(host.memory_total)) if host.memory_total else None
        )
        self._show_gpus(snap)
        self._show_history(not snap.gpus)
        self._show_ranks(snap)

    def on_resize(self) -> None:
        self._show_history(self._no_gpu)

    def _show_history(self, no_gpu: bool) -> None:
        self._no_gpu = no_gpu
        history = self.query_one("#host-history")
        history.display = no_gpu and self.size.height >= HISTORY_MIN_ROWS
        if history.display:
            self.query_one("#host-cpu", Chart).update(list(self._host_cpu))
            self.query_one("#host-mem", Chart).update(list(self._host_mem))

    def _show_gpus(self, snap: Snapshot) -> None:
        guide = self.query_one("#first-steps", TextPanel)
        if not snap.gpus and not guide.display:
            if self.host_layout is None:
                from mgpu_tui.engine.machine.host_layout import read_layout

                self.host_layout = read_layout()
            guide.update(first_steps(self.host_layout))
        guide.display = not snap.gpus
        container = self.query_one("#gpus", VerticalScroll)
        container.display = bool(snap.gpus)
        cards = list(container.query(GpuCard))
        if len(cards) != len(snap.gpus):
            container.remove_children()
            cards = [GpuCard() for _ in snap.gpus]
            container.mount_all(cards)
        ranks_on: dict[str, list[int]] = {}
        for r in snap.ranks:
            if r.gpu_uuid:
                ranks_on.setdefault(r.gpu_uuid, []).append(r.rank)
        for card, gpu in zip(cards, snap.gpus):
            history = self._util.setdefault(gpu.uuid, collections.deque(maxlen=HISTORY))
            if gpu.readings is not None and gpu.readings.util_gpu is not None:
                history.append(gpu.readings.util_gpu)
            card.show(gpu, list(history), ranks_on.get(gpu.uuid, []))

    def _show_ranks(self, snap: Snapshot) -> None:
        rows = []
        for r in snap.ranks:
            gpu = next((f"GPU{g.index}" for g in snap.gpus if g.uuid == r.gpu_uuid), "CPU")
            rows.append(
                (
                    f"rank {r.rank}",
                    str(r.pid),
                    "-" if r.cpu_percent is None else f"{r.cpu_percent:.0f}",
                    fmt_bytes(r.rss_bytes),
                    "-" if r.threads is None else str(r.threads),
                    gpu if r.alive else f"{gpu} (exited)",
                )
            )
        if rows == self._rank_rows:
            return  # an unchanged table is not redrawn: each redraw re-lays out the screen
        self._rank_rows = rows
        for part in ("#ranks-title", "#rank-processes"):  # no run, no table: the room goes to the rest
            self.query_one(part).display = bool(rows)
        table = self.query_one("#rank-processes", DataTable)
        table.clear()
        for row in rows:
            table.add_row(*row)
