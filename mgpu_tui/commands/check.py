"""``mgpu-tui --check``: the diagnostic suite, headless, for CI and for new machines.

The table goes to stdout as checks finish (to stderr when ``--json -`` takes
stdout); progress goes to stderr. Exit codes: 0 every check passed (skips and
warnings allowed), 1 a check failed, 2 usage, 3 torch cannot be imported, 130
interrupted. The JSON and JUnit files are written in every one of those cases
but usage errors, so CI keeps what ran.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mgpu_tui.commands.workload import model_fields
from mgpu_tui.console import plain
from mgpu_tui.engine.checks.suite import CheckOptions, CheckSuite, EnvironmentUnusableForChecks
from mgpu_tui.engine.launch.spec import LaunchSpec, workload_of
from mgpu_tui.engine.planning.shapes import ShapeError
from mgpu_tui.errors import ExitCode, UsageError, exit_code_for, interrupt_on_term_and_hup
from mgpu_tui.reports import check as check_output
from mgpu_tui.reports.files import ensure_writable, write_atomic


def check_command(args: argparse.Namespace) -> int:
    for path in (args.json, args.junit):
        if path and path != "-":
            ensure_writable(path)
    if args.junit == "-":
        raise UsageError("--junit needs a file name; only --json can go to stdout (-).")
    table_stream = sys.stderr if args.json == "-" else sys.stdout

    def show(result) -> None:
        print(plain(check_output.row(result)), file=table_stream, flush=True)  # a rank's words: text

    def progress(text: str) -> None:
        print(plain(f"mgpu-tui: {text}"), file=sys.stderr, flush=True)

    modes = tuple(m.strip() for m in args.modes.split(",") if m.strip()) if args.modes else None
    workload = model_fields(args)
    try:
        workload_of(LaunchSpec(mode="single", **workload))
    except ShapeError as exc:
        raise UsageError(str(exc)) from None
    options = CheckOptions(
        level=args.level,
        nproc=args.nproc,
        device=args.device,
        modes=modes,
        require_gpus=args.require_gpus,
        run_root=Path(args.run_dir),
        share_gpus=args.share_gpus,
        **workload,
    )
    suite = CheckSuite(options, on_result=show, on_progress=progress)
    interrupt_on_term_and_hup()
    trains = "" if args.model == "mlp" else f"; the smoke runs train {args.model}"
    print(f"mgpu-tui --check, level {args.level}{trains}", file=table_stream)
    print(check_output.header(suite.report), file=table_stream, flush=True)
    try:
        report = suite.run()
    except (EnvironmentUnusableForChecks, KeyboardInterrupt) as exc:
        # What ran is reported all the same, so a CI keeps it; bad input (SpecError, RunDirError)
        # raised before anything ran goes to cli.main.
        print(
            "mgpu-tui: interrupted; every rank was stopped"
            if isinstance(exc, KeyboardInterrupt)
            else plain(f"mgpu-tui: {exc}"),
            file=sys.stderr,
        )
        report, code = suite.report, exit_code_for(exc) or ExitCode.ENVIRONMENT
    else:
        code = ExitCode.FAILED if report.failed else ExitCode.OK
    extra = check_output.details(report)
    if extra:
        print("\n" + extra + "\n", file=table_stream)
    print(plain(check_output.footer(report)), file=table_stream, flush=True)
    if not _write_reports(args, report) and code is ExitCode.OK:
        return ExitCode.FAILED  # a CI that reads the report must not take its absence for a pass
    return code


def _write_reports(args: argparse.Namespace, report) -> bool:
    """Write --json and --junit; False when one could not be written (said on stderr)."""
    if args.json == "-":
        sys.stdout.write(check_output.json_text(report))
        sys.stdout.flush()
    written = True
    for path, text in ((args.json, check_output.json_text), (args.junit, check_output.junit_text)):
        if path and path != "-":
            try:
                write_atomic(path, text(report))
            except OSError as exc:
                print(f"mgpu-tui: cannot write {path}: {exc.strerror or exc}.", file=sys.stderr)
                written = False
    return written
