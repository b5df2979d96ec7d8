"""One GPU on the dashboard: memory and utilisation bars, history, temperature, power, links, ranks."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text

from mgpu_tui.app.widgets.bars import bar, rate, spark
from mgpu_tui.app.widgets.text_panel import TextPanel
from mgpu_tui.console import fmt_bytes

if TYPE_CHECKING:
    from mgpu_tui.engine.machine.telemetry import GpuSample


def _na(value, fmt: str) -> str:
    return "n/a" if value is None else fmt.format(value)


class GpuCard(TextPanel):
    DEFAULT_CLASSES = "gpu-card"
    DEFAULT_CSS = """
    GpuCard {
        padding: 0 1;
        margin: 0;
        border-left: thick $accent;
        height: 3;
    }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._shown: tuple | None = None

    def show(self, gpu: GpuSample, util_history: list[float], ranks: list[int]) -> None:
        self._shown = (gpu, util_history, ranks)
        self.update(card_text(gpu, util_history, ranks, self.size.width - 3 if self.size.width else 160))

    def on_resize(self) -> None:
        if self._shown:
            self.show(*self._shown)


SEP = " · "  # a visible separator: a screenshot drops plain spaces where a styled part ends


def fields_line(fields: list[Text], width: int) -> Text:
    """The fields in order, separated, as many as fit ``width``: the later ones are dropped first."""
    line = Text()
    for field in fields:
        extra = len(field) + (len(SEP) if line else 0)
        if line and len(line) + extra > width:
            break
        if line:
            line.append(SEP, style="dim")
        line.append_text(field)
    return line


def card_text(gpu: GpuSample, util_history: list[float], ranks: list[int], width: int) -> Text:
    """Three lines: identity and state, memory and utilisation, links. Each keeps to ``width``:
    fields never run together, and what does not fit is left out, the least useful first."""
    head = Text.assemble((f"GPU{gpu.index}:", "bold"), " ", (gpu.name, "bold cyan"))
    if gpu.lost or gpu.error:
        why = "lost: the GPU stopped answering" if gpu.lost else f"NVML error: {gpu.error}"
        return Text.assemble(
            fields_line([head, Text(why, style="bold red")], width), "\n  ", (gpu.uuid, "dim")
        )
    r = gpu.readings
    if r is None:  # a sample has readings unless the GPU was lost or NVML failed (above)
        return fields_line([head, Text("no readings", style="dim")], width)
    mem_fraction = r.memory_used / r.memory_total if r.memory_used is not None and r.memory_total else None
    power = _na(r.power_w, "{:.0f}") + "/" + _na(r.power_limit_w, "{:.0f} W")
    ranks_text = ", ".join(f"rank {k}" for k in ranks) or "no rank"
    processes = len(r.processes)
    first = fields_line(
        [
            head,
            Text(_na(r.temperature_c, "{}°C")),
            Text(power),
            Text(ranks_text, style="magenta"),
            Text(f"{processes} process{'es' if processes != 1 else ''}"),
            Text(f"SM {_na(r.sm_clock_mhz, '{} MHz')}"),
        ],
        width,
    )
    gauge = 20 if width >= 110 else 10
    util = None if r.util_gpu is None else r.util_gpu / 100
    second = fields_line(
        [
            Text.assemble(
                "mem ", bar(mem_fraction, gauge), f" {fmt_bytes(r.memory_used)} / {fmt_bytes(r.memory_total)}"
            ),
            Text.assemble("util ", bar(util, gauge), f" {_na(r.util_gpu, '{}%')}"),
            spark(util_history, gauge),
        ],
        width - 2,
    )
    # PCIe is read one GPU per sample in turn: until this one's turn, it is being measured.
    pcie = "PCIe measuring"
    if gpu.pcie_age_s is not None:
        pcie = f"PCIe ↑{rate(r.pcie_tx_bps)} ↓{rate(r.pcie_rx_bps)}"
    third = fields_line(
        [
            Text(pcie),
            Text(f"NVLink ↑{rate(gpu.nvlink_tx_bps)} ↓{rate(gpu.nvlink_rx_bps)}"),
            Text(gpu.uuid, style="dim"),
        ],
        width - 2,
    )
    return Text.assemble(first, "\n  ", second, "\n  ", third)
