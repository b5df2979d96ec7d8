"""``mgpu-tui topo``: the interconnect matrix, like ``nvidia-smi topo -m``, and what it means."""

from __future__ import annotations

import argparse

from mgpu_tui.console import plain
from mgpu_tui.engine.launch.errors import EnvironmentUnusable
from mgpu_tui.engine.machine import nvml
from mgpu_tui.engine.machine.host_layout import read_layout
from mgpu_tui.engine.machine.topology import (
    Topology,
    TopologyParseError,
    describe,
    from_nvml,
    numa_summary,
    p2p_summary,
    parse_topo_text,
    render,
)
from mgpu_tui.engine.protocol.folder import dumps as strict_json
from mgpu_tui.errors import ExitCode, UsageError
from mgpu_tui.reports.files import read_bounded
from mgpu_tui.reports.host import layout_lines

# The largest `nvidia-smi topo -m` output seen is ~4 KiB (8 GPUs, 2 NICs); a 64-GPU box with
# NICs is under 64 KiB. Anything far larger is not one.
MAX_TOPOLOGY_BYTES = 1 << 20


def _load(args: argparse.Namespace) -> tuple[Topology | None, str]:
    if args.from_file:
        text = read_bounded(args.from_file, MAX_TOPOLOGY_BYTES, "output of `nvidia-smi topo -m`")
        try:
            return parse_topo_text(text), ""
        except TopologyParseError as exc:
            raise UsageError(f"{args.from_file}: {exc}.") from None
    topology = from_nvml()
    return topology, "" if topology is not None else nvml.status().detail


def topo_command(args: argparse.Namespace) -> int:
    try:
        topology, reason = _load(args)
    except (nvml.NvmlCallFailed, nvml.GpuLost) as exc:
        raise EnvironmentUnusable(f"NVML answered, then failed while reading the topology ({exc}).") from None
    if args.json:
        if topology is None:
            print(
                strict_json({"gpus": [], "matrix": [], "reason": reason, "reading": describe(None, reason)})
            )
        else:
            print(strict_json({**topology.to_json(), "reason": None}))
        return ExitCode.OK
    if topology is None:  # no GPU matrix: the host's own layout, as the app's Topology view shows it
        print(describe(None, reason))
        print("\nThis host's own layout (ranks on the CPU run best within one NUMA node):")
        print("\n".join(f"  {line}" for line in layout_lines(read_layout())))
        return ExitCode.OK
    print(plain(render(topology)))  # names read from a file a user gave: text only
    print()
    for line in (p2p_summary(topology), numa_summary(topology), describe(topology)):
        if line:
            print(plain(line))
    return ExitCode.OK
