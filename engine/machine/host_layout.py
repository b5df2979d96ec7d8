"""The host's own layout: sockets, NUMA nodes, cores and memory per node, from Linux's sysfs.

Where there are no GPUs to show, this is the machine's topology that still matters: ranks on
the CPU run fastest when each stays within one NUMA node's cores and memory. Every file is
small and read with a bound; a field Linux does not expose (a container that hides sysfs)
is None, never guessed.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

SYS = Path("/sys/devices/system")
_MEM_TOTAL = re.compile(r"MemTotal:\s+(\d+)\s+kB")


@dataclass(frozen=True)
class NumaNode:
    node: int
    cpus: str  # Linux's cpulist, e.g. "0-15,32-47"
    cpu_count: int
    memory_bytes: int | None


@dataclass(frozen=True)
class HostLayout:
    logical_cpus: int
    physical_cores: int | None  # distinct (socket, core) pairs
    sockets: int | None
    nodes: tuple[NumaNode, ...]


def _read(path: Path, limit: int = 1 << 16) -> str | None:
    try:
        with open(path, "rb") as f:
            return f.read(limit).decode("ascii", "replace").strip()
    except OSError:
        return None


def cpulist_count(cpulist: str) -> int:
    """How many CPUs a Linux cpulist names: "0-3,8,10-11" is 7."""
    count = 0
    for part in filter(None, cpulist.split(",")):
        low, _, high = part.partition("-")
        if low.isdigit() and (not high or high.isdigit()):
            count += int(high) - int(low) + 1 if high else 1
    return count


def read_layout(root: Path = SYS) -> HostLayout:
    packages: set[str] = set()
    cores: set[tuple[str, str]] = set()
    cpu_dir = root / "cpu"
    names = [e for e in _listdir(cpu_dir) if re.fullmatch(r"cpu\d+", e)]
    for name in names:
        package = _read(cpu_dir / name / "topology" / "physical_package_id")
        core = _read(cpu_dir / name / "topology" / "core_id")
        if package is not None:
            packages.add(package)
            if core is not None:
                cores.add((package, core))
    nodes = []
    node_names = [e for e in _listdir(root / "node") if re.fullmatch(r"node\d+", e)]
    for name in sorted(node_names, key=lambda n: int(n[4:])):
        cpus = _read(root / "node" / name / "cpulist") or ""
        meminfo = _read(root / "node" / name / "meminfo") or ""
        match = _MEM_TOTAL.search(meminfo)
        nodes.append(
            NumaNode(
                int(name[4:]),
                cpus or "none",
                cpulist_count(cpus),
                int(match.group(1)) * 1024 if match else None,
            )
        )
    return HostLayout(
        logical_cpus=len(names) or (os.cpu_count() or 0),
        physical_cores=len(cores) or None,
        sockets=len(packages) or None,
        nodes=tuple(nodes),
    )


def _listdir(path: Path) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []
