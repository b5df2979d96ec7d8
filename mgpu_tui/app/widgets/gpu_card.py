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

    def show(self, gpu: GpuSample, util_history: list[float], ranks: list[int]) -> None:
        head = Text.assemble((f"GPU{gpu.index} ", "bold"), (gpu.name, "bold cyan"))
        if gpu.lost:
            self.update(Text.assemble(head, "  ", ("lost: the GPU stopped answering", "bold red"), "\n  ",
                                      (gpu.uuid, "dim")))
            return
        if gpu.error:
            self.update(Text.assemble(head, "  ", (f"NVML error: {gpu.error}", "bold red"), "\n  ",
                                      (gpu.uuid, "dim")))
            return
        r = gpu.readings
        mem_fraction = None
        if r.memory_used is not None and r.memory_total:
            mem_fraction = r.memory_used / r.memory_total
        power = _na(r.power_w, "{:.0f}") + "/" + _na(r.power_limit_w, "{:.0f} W")
        ranks_text = ", ".join(f"rank {k}" for k in ranks) or "no rank"
        self.update(Text.assemble(
            head, f"   {_na(r.temperature_c, '{}°C')}  {power}  SM {_na(r.sm_clock_mhz, '{} MHz')}   ",
            (ranks_text, "magenta"), f"  processes {len(r.processes)}",
            "\n  mem ", bar(mem_fraction), f" {fmt_bytes(r.memory_used):>10} / {fmt_bytes(r.memory_total)}",
            "   util ", bar(None if r.util_gpu is None else r.util_gpu / 100),
            f" {_na(r.util_gpu, '{}%'):>4} ", spark(util_history),
            "\n  PCIe " + (f"↑{rate(r.pcie_tx_bps)} ↓{rate(r.pcie_rx_bps)}   " if gpu.pcie_age_s is not None
                           else "measuring   "),  # read one GPU per sample in turn
            f"NVLink ↑{rate(gpu.nvlink_tx_bps)} ↓{rate(gpu.nvlink_rx_bps)}   ", (gpu.uuid, "dim"),
        ))  # fmt: skip
