"""The interconnect topology: which GPUs talk over NVLink, which cross a PCIe switch or the CPU socket.

Two ways in, one :class:`Topology` out:

- :func:`from_nvml` asks the driver (what ``nvidia-smi topo -m`` shows, plus P2P).
- :func:`parse_topo_text` reads the text ``nvidia-smi topo -m`` prints, in every
  variation seen on real machines: tabs or runs of spaces, a "GPU NUMA ID" column
  or not, NIC rows named NIC<n> (with a legend) or after the device (mlx5_0),
  empty cells, "N/A", a legend or none.

Labels, as nvidia-smi writes them: ``X`` (self), ``NV<n>`` (n bonded NVLinks),
``PIX`` (at most one PCIe bridge), ``PXB`` (several PCIe bridges), ``PHB`` (a PCIe
host bridge, the CPU), ``NODE`` (between host bridges of one NUMA node), ``SYS``
(across the SMP interconnect between NUMA nodes: another CPU socket).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field

from mgpu_tui.engine.machine import nvml

# Best first: what a pair of GPUs would rather be connected by.
_PCIE_ORDER = ["PIX", "PXB", "PHB", "NODE", "SYS"]
# What a PCIe label means as a path between two GPUs.
PATH = {
    "PIX": "one PCIe switch",
    "PXB": "several PCIe switches",
    "PHB": "a PCIe host bridge (the CPU)",
    "NODE": "PCIe host bridges of one NUMA node",
    "SYS": "the interconnect between CPU sockets",
}
# More NVLinks to NVSwitches than any direct mesh gives one pair: a switch.
_MAX_DIRECT_LINKS = 18


class TopologyParseError(ValueError):
    """The text is not an ``nvidia-smi topo -m`` matrix."""


@dataclass(frozen=True)
class GpuPlace:
    index: int
    name: str | None  # from NVML; the text has no names
    cpu_affinity: str | None  # "0-23,48-71", as nvidia-smi writes it
    numa_affinity: str | None
    gpu_numa_id: str | None


@dataclass(frozen=True)
class Topology:
    gpus: tuple[GpuPlace, ...]
    matrix: tuple[tuple[str, ...], ...]  # matrix[i][j]: the link between GPU i and GPU j
    nics: tuple[str, ...] = ()  # NIC names, as the text names them (NIC0, mlx5_0)
    nic_links: dict[str, tuple[str, ...]] = field(default_factory=dict)  # NIC -> label to each GPU
    nvswitch: bool | None = None  # True, False, or None when it cannot be told
    p2p: dict[str, tuple[tuple[bool | None, ...], ...]] | None = None  # from NVML only
    source: str = "nvml"

    def to_json(self) -> dict:
        document = asdict(self)
        document["matrix"] = [list(row) for row in self.matrix]
        document["reading"] = describe(self)
        return document


# ---- from NVML --------------------------------------------------------------------------


def ranges(cpus: list[int] | None) -> str | None:
    """[0, 1, 2, 5] -> "0-2,5", as nvidia-smi prints affinity."""
    if cpus is None:
        return None
    if not cpus:
        return "N/A"
    out, start, prev = [], cpus[0], cpus[0]
    for c in cpus[1:] + [None]:
        if c is not None and c == prev + 1:
            prev = c
            continue
        out.append(f"{start}-{prev}" if prev > start else f"{start}")
        if c is not None:
            start = prev = c
    return ",".join(out)


def from_nvml() -> Topology | None:
    """The topology NVML reports, or None when NVML is not available here."""
    status = nvml.status()
    if not status.ok:
        return None
    count = status.device_count
    ids = [nvml.identity(i) for i in range(count)]
    index_of_bus = {_bus(g.pci_bus_id): g.index for g in ids}
    links = [nvml.nvlinks(i) for i in range(count)]

    def nvlink_count(i: int, j: int) -> int:
        direct = sum(n for bus, n in links[i].to_gpu.items() if index_of_bus.get(_bus(bus)) == j)
        # Through NVSwitch, every GPU reaches every other over all of its switch links.
        switched = min(links[i].to_switch, links[j].to_switch)
        return direct + switched

    matrix = []
    for i in range(count):
        row = []
        for j in range(count):
            if i == j:
                row.append("X")
            elif (n := nvlink_count(i, j)) > 0:
                row.append(f"NV{n}")
            else:
                row.append(nvml.common_ancestor(i, j) or "N/A")
        matrix.append(tuple(row))
    p2p: dict[str, list[tuple[bool | None, ...]]] = {kind: [] for kind in ("read", "write", "nvlink")}
    for i in range(count):
        rows: dict[str, list[bool | None]] = {kind: [] for kind in p2p}
        for j in range(count):
            status_ij = {"read": None, "write": None, "nvlink": None} if i == j else nvml.p2p(i, j)
            for kind in p2p:
                rows[kind].append(status_ij[kind])
        for kind in p2p:
            p2p[kind].append(tuple(rows[kind]))
    numa_ids = [nvml.gpu_numa_id(i) for i in range(count)]
    gpus = tuple(
        GpuPlace(
            index=i,
            name=ids[i].name,
            cpu_affinity=ranges(nvml.cpu_affinity(i)),
            numa_affinity=ranges(nvml.numa_affinity(i)),
            gpu_numa_id="N/A" if numa_ids[i] is None else str(numa_ids[i]),
        )
        for i in range(count)
    )
    return Topology(
        gpus=gpus,
        matrix=tuple(matrix),
        nvswitch=any(link.to_switch for link in links),
        p2p={kind: tuple(rows) for kind, rows in p2p.items()},
        source="nvml",
    )


def _bus(bus_id: str) -> str:
    """PCI bus ids come as 00000000:07:00.0 or 0000:07:00.0; compare the short form."""
    bus_id = bus_id.lower()
    domain, _, rest = bus_id.partition(":")
    return f"{int(domain, 16):04x}:{rest}" if rest else bus_id


# ---- from nvidia-smi topo -m text ----------------------------------------------------------

_AFFINITY_COLUMNS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
_GPU = re.compile(r"GPU(\d+)$")


def _cells(line: str, tabbed: bool) -> list[str]:
    if tabbed:
        return [cell.strip() for cell in line.split("\t")]
    return [cell.strip() for cell in re.split(r"\s{2,}", line.strip())]


# Terminal escapes (CSI sequences): nvidia-smi underlines the header with them even into a pipe.
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def parse_topo_text(text: str) -> Topology:
    lines = [line.rstrip("\n\r") for line in _ANSI.sub("", text).splitlines()]
    header_at = next((k for k, line in enumerate(lines) if re.search(r"\bGPU0\b", line)), None)
    if header_at is None:
        raise TopologyParseError("no GPU0 column: this is not `nvidia-smi topo -m` output")
    tabbed = "\t" in lines[header_at]
    header = [c for c in _cells(lines[header_at], tabbed) if c]
    devices = [c for c in header if c not in _AFFINITY_COLUMNS]
    extras = [c for c in header if c in _AFFINITY_COLUMNS]
    gpu_names = [d for d in devices if _GPU.match(d)]
    if not gpu_names:
        raise TopologyParseError("no GPU columns (GPU0, GPU1, ...): this is not `nvidia-smi topo -m` output")
    if [int(m.group(1)) for g in gpu_names if (m := _GPU.match(g))] != list(range(len(gpu_names))):
        raise TopologyParseError("the GPU columns are not GPU0, GPU1, ... in order")

    rows: dict[str, list[str]] = {}
    for line in lines[header_at + 1 :]:
        if not line.strip():
            break  # the matrix ends at the first blank line; the legend follows
        cells = _cells(line, tabbed)
        name, values = cells[0], cells[1:]
        if name not in devices:
            break
        rows[name] = values

    gpus, matrix = [], []
    for g, gpu in enumerate(gpu_names):
        if gpu not in rows:
            raise TopologyParseError(f"no row for {gpu}")
        values = rows[gpu]
        links = [_label(v) for v in values[: len(devices)]]
        if len(links) < len(devices):
            raise TopologyParseError(f"the row of {gpu} is too short")
        # The affinity cells follow; some versions pad with an empty cell, so take the non-empty ones.
        affinity = dict(zip(extras, [v for v in values[len(devices) :] if v]))
        gpus.append(
            GpuPlace(
                g,
                None,
                affinity.get("CPU Affinity"),
                affinity.get("NUMA Affinity"),
                affinity.get("GPU NUMA ID"),
            )
        )
        matrix.append(tuple(links[devices.index(other)] for other in gpu_names))
    nics = tuple(d for d in devices if d not in gpu_names)
    nic_links = {}
    for nic in nics:
        values = rows.get(nic, [])
        nic_links[nic] = tuple(
            _label(values[devices.index(g)]) if devices.index(g) < len(values) else "N/A" for g in gpu_names
        )
    return Topology(
        gpus=tuple(gpus),
        matrix=tuple(matrix),
        nics=nics,
        nic_links=nic_links,
        nvswitch=_infer_nvswitch(matrix),
        source="text",
    )


def _label(cell: str) -> str:
    return cell.strip() or "N/A"


def _infer_nvswitch(matrix) -> bool | None:
    """From text alone: every pair on the same NV<k>, more links than a direct mesh could give."""
    n = len(matrix)
    labels = {matrix[i][j] for i in range(n) for j in range(n) if i != j}
    if n < 3 or len(labels) != 1:
        return None if any(label.startswith("NV") for label in labels) else False
    (label,) = labels
    if not label.startswith("NV"):
        return False
    return int(label[2:]) * (n - 1) > _MAX_DIRECT_LINKS or None


# ---- reading it -----------------------------------------------------------------------------


def _rank(label: str) -> tuple[int, int]:
    """Sort key: NVLink first (more links better), then PCIe from closest to farthest."""
    if label.startswith("NV") and label[2:].isdigit():
        return (0, -int(label[2:]))
    return (1, _PCIE_ORDER.index(label) if label in _PCIE_ORDER else len(_PCIE_ORDER))


def _pair(i: int, j: int, label: str) -> str:
    if label.startswith("NV"):
        return f"GPU{i}-GPU{j} are an NVLink pair ({label})"
    if label == "SYS":
        return f"GPU{i}-GPU{j} crosses the CPU socket (SYS)"
    return f"GPU{i}-GPU{j} connect through {PATH.get(label, label)} ({label})"


def describe(topology: Topology | None, reason: str = "") -> str:
    """One plain sentence that reads the matrix."""
    if topology is None or not topology.gpus:
        return f"no NVIDIA GPU here{': ' + reason if reason else ''}."
    n = len(topology.gpus)
    if n == 1:
        return "one GPU: nothing to connect."
    pairs = [(i, j, topology.matrix[i][j]) for i in range(n) for j in range(i + 1, n)]
    labels = {label for _, _, label in pairs}
    if len(labels) == 1:
        (label,) = labels
        if label.startswith("NV") and topology.nvswitch:
            return f"all {n} GPUs share NVSwitch ({label}): any pairing is equal."
        if label.startswith("NV"):
            return f"all {n} GPUs are linked to each other by NVLink ({label}): any pairing is equal."
        return (
            f"all {n} GPUs connect through {PATH.get(label, label)} ({label}), with no NVLink: "
            "any pairing is equal."
        )
    best = min(pairs, key=lambda p: _rank(p[2]))
    worst = max(pairs, key=lambda p: _rank(p[2]))
    return f"{_pair(*best)}; {_pair(*worst)}."


def numa_summary(topology: Topology) -> str:
    """Which GPUs sit on which NUMA node, with the CPUs near them."""
    groups: dict[tuple, list[int]] = {}
    for g in topology.gpus:
        groups.setdefault((g.numa_affinity, g.cpu_affinity), []).append(g.index)
    parts = [
        f"GPU {','.join(map(str, idx))} on NUMA node {node} (CPUs {cpus})"
        for (node, cpus), idx in groups.items()
    ]
    return "NUMA: " + "; ".join(parts)


def p2p_summary(topology: Topology) -> str | None:
    """How many GPU pairs support peer-to-peer read, write and NVLink (NVML only)."""
    if topology.p2p is None:
        return None
    n = len(topology.gpus)
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
    counts = [
        f"{kind} {sum(1 for i, j in pairs if topology.p2p[kind][i][j])}/{len(pairs)} pairs"
        for kind in ("read", "write", "nvlink")
    ]
    return "P2P: " + ", ".join(counts)


def render(topology: Topology) -> str:
    """The matrix as nvidia-smi prints it, with the affinity columns."""
    n = len(topology.gpus)
    names = [f"GPU{i}" for i in range(n)] + list(topology.nics)
    header = ["", *names, "CPU Affinity", "NUMA Affinity"]
    rows = []
    for g in topology.gpus:
        links = list(topology.matrix[g.index]) + [topology.nic_links[nic][g.index] for nic in topology.nics]
        rows.append([f"GPU{g.index}", *links, g.cpu_affinity or "N/A", g.numa_affinity or "N/A"])
    for nic in topology.nics:
        rows.append([nic, *topology.nic_links[nic], *["" for _ in topology.nics], "", ""])
    widths = [max(len(str(r[c])) for r in [header, *rows]) for c in range(len(header))]
    lines = ("  ".join(str(cell).ljust(w) for cell, w in zip(r, widths)).rstrip() for r in [header, *rows])
    return "\n".join(lines)
