"""``mgpu-tui nccl LOG...``: NCCL's own account of a job (NCCL_DEBUG=INFO), read and explained."""

from __future__ import annotations

import argparse

from mgpu_tui.console import plain, table
from mgpu_tui.engine.machine.nccl_log import NcclReading, disagreements, read_nccl_log
from mgpu_tui.engine.machine.topology import TopologyParseError, parse_topo_text
from mgpu_tui.engine.protocol.folder import dumps as strict_json
from mgpu_tui.errors import ExitCode, UsageError
from mgpu_tui.reports.files import read_bounded

# NCCL_DEBUG=INFO writes a few hundred lines a rank at start-up; 64 MiB is thousands of ranks.
# (NCCL_DEBUG_SUBSYS=ALL or TRACE can write more: give the start of such a log.)
MAX_LOG_BYTES = 64 << 20
MAX_TOPOLOGY_BYTES = 1 << 20


def nccl_command(args: argparse.Namespace) -> int:
    texts = [read_bounded(path, MAX_LOG_BYTES, "NCCL_DEBUG=INFO output") for path in args.logs]
    reading = read_nccl_log(line for text in texts for line in text.splitlines())
    notes = []
    if args.topo:
        try:
            text = read_bounded(args.topo, MAX_TOPOLOGY_BYTES, "output of `nvidia-smi topo -m`")
            topology = parse_topo_text(text)
        except TopologyParseError as exc:
            raise UsageError(f"{args.topo}: {exc}.") from None
        notes = disagreements(reading, topology)
    if args.json:
        print(strict_json({**reading.to_json(), "files": list(args.logs), "disagreements": notes}))
    else:
        print(plain(report(reading, notes)))  # hosts, paths and messages come from the log: text only
    # 1 for a log with no NCCL lines, or one whose job hit an NCCL error: a CI can tell from the code.
    return ExitCode.OK if reading.nccl_lines and not reading.errors else ExitCode.FAILED


def report(reading: NcclReading, notes: list[str]) -> str:
    if not reading.nccl_lines:
        return (
            "no NCCL lines in this log: was the job run with NCCL_DEBUG=INFO (and NCCL_DEBUG_FILE, "
            "if set, pointing at these files)?"
        )
    out = []
    version = ", ".join(reading.versions) or "version not logged"
    out.append(f"NCCL {version}")
    for host, entry in reading.hosts.items():
        ranks = ", ".join(map(str, entry["ranks"])) or "none initialised here"
        out.append(f"host {host}: ranks {ranks} ({len(entry['pids'])} process(es))")
    if reading.links:
        rows = [
            [
                f"{link.src} -> {link.dst}",
                link.kind,
                link.via,
                link.direction or "",
                _spans(link.channels),
                link.host,
            ]
            for link in reading.links
        ]
        out += [
            "",
            "Connections (NCCL's own words in 'via'):",
            table(["ranks", "transport", "via", "direction", "channels", "logged on"], rows),
        ]
    counts = reading.channel_counts
    if reading.ring_channels or counts:
        line = f"channels: {reading.ring_channels or '?'} ring"
        if counts:
            line += f"; {counts['coll']} coll, {counts['p2p']} p2p ({counts['peer']} per peer)"
            line += f", {counts['nvls']} NVLS" if "nvls" in counts else ""
        out.append("\n" + line)
    if reading.env:
        out.append("set by environment: " + ", ".join(f"{k}={v}" for k, v in reading.env.items()))
    if reading.warnings:
        out.append("\nWarnings:")
        for w in reading.warnings:
            times = f"{w.count}x " if w.count > 1 else ""
            out.append(f"  {times}{w.message}" + (f" ({w.source})" if w.source else ""))
            if w.meaning:
                out.append(f"      means: {w.meaning}")
    if reading.errors:
        out.append("\nErrors:")
        out += [f"  {e}" for e in reading.errors]
    if notes:
        out.append("\nAgainst the topology:")
        out += [f"  {n}" for n in notes]
    out.append(f"\nIn one line: {reading.summary()}")
    return "\n".join(out)


def _spans(channels: list[int]) -> str:
    """[0, 1, 2, 5] -> "0-2, 5"."""
    spans, start = [], None
    for i, c in enumerate(channels):
        if start is None:
            start = c
        if i + 1 == len(channels) or channels[i + 1] != c + 1:
            spans.append(f"{start}-{c}" if c != start else str(c))
            start = None
    return ", ".join(spans)
