"""``mgpu-tui topo``: the interconnect matrix, like ``nvidia-smi topo -m``, and what it means."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from mgpu_tui.cli_errors import UsageError
from mgpu_tui.engine import nvml
from mgpu_tui.engine.topology import (
    Topology,
    TopologyParseError,
    describe,
    from_nvml,
    parse_topo_text,
    render,
)
from mgpu_tui.exit_codes import ExitCode


def _load(args: argparse.Namespace) -> tuple[Topology | None, str]:
    if args.from_file:
        try:
            text = Path(args.from_file).read_text(errors="replace")
        except OSError as exc:
            raise UsageError(f"cannot read {args.from_file}: {exc.strerror or exc}.") from None
        try:
            return parse_topo_text(text), ""
        except TopologyParseError as exc:
            raise UsageError(f"{args.from_file}: {exc}.") from None
    topology = from_nvml()
    return topology, "" if topology is not None else nvml.status().detail


def _numa_text(topology: Topology) -> str:
    groups: dict[tuple, list[int]] = {}
    for g in topology.gpus:
        groups.setdefault((g.numa_affinity, g.cpu_affinity), []).append(g.index)
    parts = [f"GPU {','.join(map(str, idx))} on NUMA node {node} (CPUs {cpus})"
             for (node, cpus), idx in groups.items()]  # fmt: skip
    return "NUMA: " + "; ".join(parts)


def _p2p_text(topology: Topology) -> str | None:
    if topology.p2p is None:
        return None
    n = len(topology.gpus)
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
    lines = []
    for kind in ("read", "write", "nvlink"):
        ok = sum(1 for i, j in pairs if topology.p2p[kind][i][j])
        lines.append(f"{kind} {ok}/{len(pairs)} pairs")
    return "P2P: " + ", ".join(lines)


def topo_command(args: argparse.Namespace) -> int:
    topology, reason = _load(args)
    if args.json:
        if topology is None:
            print(json.dumps({"gpus": [], "matrix": [], "reason": reason, "reading": describe(None, reason)}))
        else:
            print(json.dumps({**topology.to_json(), "reason": None}))
        return ExitCode.OK
    if topology is None:
        print(describe(None, reason))
        return ExitCode.OK
    print(render(topology))
    print()
    for line in (_p2p_text(topology), _numa_text(topology), describe(topology)):
        if line:
            print(line)
    return ExitCode.OK
