"""How ``mgpu-tui --check`` reports: a table row per check, a JSON document, a JUnit file.

JUnit XML as CI systems read it (Jenkins, GitLab, GitHub test reporters): one
``<testcase>`` per check, ``<failure>`` for a failed one, ``<skipped>`` for a
skipped one; a warning passes and says so in ``<system-out>``.
"""

from __future__ import annotations

import socket
import time
import xml.etree.ElementTree as ET

from mgpu_tui.console import plain
from mgpu_tui.engine.checks.results import (
    CheckReport,
    CheckResult,
    ScalingPoint,
    Status,
    SweepPoint,
    copy_matrix,
    scaling_points,
    sweep_points,
)
from mgpu_tui.engine.protocol.folder import dumps as strict_json

NAME_WIDTH = 26


def row(result: CheckResult) -> str:
    return (
        f"{result.status.value.upper():<4}  {result.name:<{NAME_WIDTH}} {result.seconds:6.2f} s  "
        f"{result.detail}"
    )


def header(report: CheckReport) -> str:
    return f"{'':<4}  {'check':<{NAME_WIDTH}} {'time':>8}  detail"


def footer(report: CheckReport) -> str:
    counts = report.counts()
    seconds = (report.ended_at or time.time()) - report.started_at
    text = (
        f"{len(report.results)} checks: {counts['pass']} passed, {counts['fail']} failed, "
        f"{counts['skip']} skipped, {counts['warn']} warned, in {seconds:.1f} s"
    )
    if report.run_dir:
        text += f"; rank logs in {report.run_dir}"
    return text


def sweep_table(points: list[SweepPoint], nproc: int | None) -> str:
    """The all_reduce sweep as nccl-tests prints it: size, count, type, time, algbw, busbw."""
    lines = [
        f"all_reduce sweep on {nproc} rank(s), in place, sum (nccl-tests columns)",
        f"{'size (B)':>12} {'count':>12} {'type':>8} {'time (us)':>12} {'algbw (GB/s)':>13} "
        f"{'busbw (GB/s)':>13}",
    ]
    for p in points:
        lines.append(
            f"{p.size_bytes:>12} {p.count:>12} {p.type:>8} {p.time_us:>12.1f} "
            f"{p.algbw_GBps:>13.2f} {p.busbw_GBps:>13.2f}"
        )
    return "\n".join(lines)


def scaling_table(points: list[ScalingPoint]) -> str:
    lines = [f"{'ranks':>5} {'samples/s':>12} {'speedup':>8} {'efficiency':>10}"]
    for p in points:
        lines.append(f"{p.nproc:>5} {p.samples_per_s:>12,.0f} {p.speedup:>7.2f}x {100 * p.efficiency:>9.0f}%")
    return "\n".join(lines)


def copy_matrix_table(matrix: list[list[float | None]]) -> str:
    n = len(matrix)
    lines = [
        "GPU-to-GPU copy bandwidth (GB/s), row: from, column: to",
        "      " + "".join(f"{f'GPU{j}':>8}" for j in range(n)),
    ]
    for i, row_values in enumerate(matrix):
        cells = "".join(f"{'X' if v is None else f'{v:.1f}':>8}" for v in row_values)
        lines.append(f"GPU{i:<3}" + cells)
    return "\n".join(lines)


def details(report: CheckReport) -> str:
    """The tables behind the level-3 checks, printed after the check table."""
    parts = []
    for result in report.results:
        if result.status is not Status.PASS:
            continue
        try:
            if result.name == "sweep:all_reduce":
                parts.append(sweep_table(sweep_points(result), report.nproc))
            elif result.name == "scaling:ddp":
                heading = "ddp scaling, " + result.detail.split(":", 1)[0]
                parts.append(heading + "\n" + scaling_table(scaling_points(result)))
            elif result.name == "copy_matrix":
                parts.append(copy_matrix_table(copy_matrix(result)))
        except ValueError as exc:  # Invalid: a rank's figures that are not what the table needs
            parts.append(plain(f"{result.name}: its figures cannot be shown ({exc})"))
    return "\n\n".join(parts)


def json_text(report: CheckReport) -> str:
    return strict_json(report.to_json(), indent=2) + "\n"


def _group(name: str) -> str:
    prefix, sep, _ = name.partition(":")
    return f"mgpu-tui.check.{prefix if sep else 'environment'}"


def junit_text(report: CheckReport) -> str:
    counts = report.counts()
    seconds = f"{(report.ended_at or time.time()) - report.started_at:.3f}"
    suites = ET.Element(
        "testsuites",
        name="mgpu-tui --check",
        tests=str(len(report.results)),
        failures=str(counts[Status.FAIL.value]),
        skipped=str(counts[Status.SKIP.value]),
        errors="0",
        time=seconds,
    )
    suite = ET.SubElement(
        suites,
        "testsuite",
        name="mgpu-tui.check",
        tests=str(len(report.results)),
        failures=str(counts[Status.FAIL.value]),
        skipped=str(counts[Status.SKIP.value]),
        errors="0",
        time=seconds,
        timestamp=time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(report.started_at)),
        hostname=socket.gethostname(),
    )
    properties = ET.SubElement(suite, "properties")
    for key, value in (
        ("level", report.level),
        ("nproc", report.nproc),
        ("device", report.device),
        ("run_dir", report.run_dir),
    ):
        ET.SubElement(properties, "property", name=key, value="" if value is None else str(value))
    for result in report.results:
        case = ET.SubElement(
            suite, "testcase", classname=_group(result.name), name=result.name, time=f"{result.seconds:.3f}"
        )
        detail = plain(result.detail)  # XML has no place for control characters, escaped or not
        if result.status is Status.FAIL:
            failure = ET.SubElement(case, "failure", message=detail, type="CheckFailed")
            failure.text = detail + ("\n" + strict_json(result.metrics) if result.metrics else "")
        elif result.status is Status.SKIP:
            ET.SubElement(case, "skipped", message=detail)
        out = ET.SubElement(case, "system-out")
        out.text = ("warning: " if result.status is Status.WARN else "") + detail
    ET.indent(suites)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"
