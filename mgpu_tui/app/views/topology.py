"""The interconnect matrix, coloured by link kind, with its legend and its reading."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual.widgets import Static

from mgpu_tui.app.messages import TopologyRead
from mgpu_tui.engine.machine.topology import PATH, Topology, describe, numa_summary, p2p_summary

if TYPE_CHECKING:
    from mgpu_tui.engine.machine.host_layout import HostLayout

STYLE = {"PIX": "cyan", "PXB": "cyan", "PHB": "yellow", "NODE": "yellow", "SYS": "red", "X": "dim"}


def _style(label: str) -> str:
    return "bold green" if label.startswith("NV") else STYLE.get(label, "white")


class TopologyView(Static):
    DEFAULT_CSS = """
    TopologyView {
        padding: 1 2;
    }
    """

    def __init__(self, host_layout: HostLayout | None = None, **kwargs) -> None:
        # Until the read is done nothing is said of GPUs: a big box takes a while.
        super().__init__(Text("reading the topology through NVML…", style="dim"), **kwargs)
        self.host_layout = host_layout  # the host's layout; read from this machine when not given

    def on_topology_read(self, message: TopologyRead) -> None:
        self.show(message.topology, message.reason)

    def show(self, topology: Topology | None, reason: str = "") -> None:
        if topology is None or not topology.gpus:
            from mgpu_tui.engine.machine.host_layout import read_layout
            from mgpu_tui.reports.host import layout_lines

            text = Text(describe(topology, reason), style="bold")
            text.append(
                "\n\nThis host's own layout (ranks on the CPU run best within one NUMA node):\n", style="bold"
            )
            text.append("\n".join(f"  {line}" for line in layout_lines(self.host_layout or read_layout())))
            self.update(text)
            return
        table = Table(title="GPU interconnect (like nvidia-smi topo -m)", title_justify="left")
        table.add_column("")
        names = [f"GPU{g.index}" for g in topology.gpus] + list(topology.nics)
        for name in names:
            table.add_column(name, justify="center")
        table.add_column("CPU affinity")
        table.add_column("NUMA")
        for g in topology.gpus:
            links = list(topology.matrix[g.index]) + [topology.nic_links[n][g.index] for n in topology.nics]
            table.add_row(
                f"GPU{g.index}",
                *(Text(x, style=_style(x)) for x in links),
                g.cpu_affinity or "n/a",
                g.numa_affinity or "n/a",
            )
        legend = Text("Legend\n", style="bold")
        legend.append_text(Text.assemble(("  NV#", "bold green"), "  a bonded set of # NVLinks"))
        for label, path in PATH.items():
            legend.append_text(Text.assemble("\n  ", (f"{label:<4}", _style(label)), f" through {path}"))
        parts: list[RenderableType] = [table, legend]
        for line in (p2p_summary(topology), numa_summary(topology)):
            if line:
                parts.append(Text(line))
        parts.append(Text(describe(topology), style="bold"))
        self.update(Group(*parts))
