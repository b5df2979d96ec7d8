"""The host's own layout in words (sockets, cores, NUMA nodes and their memory): the first screen
and the Topology view show it in the app, `mgpu-tui topo` on a machine without GPUs."""

from __future__ import annotations

from mgpu_tui.console import fmt_bytes
from mgpu_tui.engine.machine.host_layout import HostLayout


def layout_lines(layout: HostLayout) -> list[str]:
    """The host's layout for a person: the whole, then each NUMA node."""

    def some(n: int | None, what: str) -> str:
        return f"{n} {what}{'s' if n != 1 else ''}" if n else f"{what}s n/a"

    lines = [
        ", ".join(
            (
                some(layout.sockets, "socket"),
                some(layout.physical_cores, "core"),
                some(layout.logical_cpus, "logical CPU"),
                some(len(layout.nodes), "NUMA node"),
            )
        )
    ]
    for n in layout.nodes:
        lines.append(f"NUMA node {n.node}: CPUs {n.cpus} ({n.cpu_count}), memory {fmt_bytes(n.memory_bytes)}")
    return lines
