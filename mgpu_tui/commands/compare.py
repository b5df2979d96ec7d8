"""``mgpu-tui compare`` and ``mgpu-tui scale``: several runs, one table, charts and a report file.

Exit codes: 0 every run ok, 1 a run failed (its row says why; the others still
ran), 2 usage (checked before anything starts), 3 environment unusable, 130
interrupted (every rank stopped; the rows so far are still written).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mgpu_tui.commands.workload import model_fields
from mgpu_tui.console import fmt_rate, fmt_seconds, plain, redraw
from mgpu_tui.engine.compare import comparison as compare
from mgpu_tui.engine.compare import scaling
from mgpu_tui.engine.compare.runner import Runner
from mgpu_tui.engine.launch import options
from mgpu_tui.engine.launch.spec import LaunchSpec
from mgpu_tui.engine.machine import host as host_module
from mgpu_tui.engine.planning.defaults import DEFAULTS as D
from mgpu_tui.engine.protocol.folder import dumps as strict_json
from mgpu_tui.errors import ExitCode, UsageError, interrupt_on_term_and_hup
from mgpu_tui.reports import compare as compare_output
from mgpu_tui.reports import compare_charts
from mgpu_tui.reports.files import ensure_writable, write_atomic


def _template(args: argparse.Namespace, nproc: int | None, batch_size: int, lr: float = D.lr) -> LaunchSpec:
    return LaunchSpec(
        **options.spec_values(args, "steps", "device", "amp", "width", "depth", "share_gpus", "run_dir"),
        mode="single",
        nproc=nproc,
        batch_size=batch_size,
        lr=lr,
        demo_args=("--amp-dtype", args.amp_dtype) if args.amp_dtype else (),
        **model_fields(args),
    )


def _out_suffix(out: str | None) -> str | None:
    if out is None:
        return None
    suffix = Path(out).suffix.lower()
    if suffix not in compare_output.FORMATS:
        raise UsageError(f"--out must end in .json, .md or .csv, got {out!r}.")
    ensure_writable(out)
    return suffix


class Progress:
    """A line on stderr per finished run, and the running run's step now and then."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.reported = 0
        self.live = sys.stderr.isatty()

    def update(self, comparison: compare.Comparison, running) -> None:
        while self.reported < len(comparison.rows):
            row = comparison.rows[self.reported]
            self.reported += 1
            rate = f"{fmt_rate(row.samples_per_s)} samples/s" if row.samples_per_s else row.root_cause or ""
            self._clear()
            print(
                f"mgpu-tui: [{self.reported}/{self.total}] {row.mode} on {row.world_size} rank(s), global "
                f"batch {row.batch_size}: {row.status}, {rate}, {fmt_seconds(row.duration_s)}",
                file=sys.stderr,
                flush=True,
            )
        if self.live and running:
            parts = [
                f"{r.resolved.mode.name} step {r.stats().steps}/{r.resolved.spec.steps}" for r in running
            ]
            redraw(sys.stderr, "  ".join(parts))
            sys.stderr.flush()

    def _clear(self) -> None:
        if self.live:
            redraw(sys.stderr)


def _execute(runner: Runner, out: str | None, suffix: str | None, as_json: bool) -> int:
    runner.check()  # bad input raises: cli.main says it and exits
    interrupt_on_term_and_hup()
    comparison = runner.comparison
    code = None
    try:
        runner.run()
    except KeyboardInterrupt:  # the runs so far are reported all the same
        print("\nmgpu-tui: interrupted; every rank was stopped", file=sys.stderr)
        code = ExitCode.INTERRUPTED
    return _report(comparison, out, suffix, as_json, code)


def _report(
    comparison: compare.Comparison, out: str | None, suffix: str | None, as_json: bool, code: int | None
) -> int:
    """Print the table and charts (or the JSON), write --out, and give the exit code."""
    scale = comparison.kind == "scale"
    if as_json:
        print(strict_json(comparison.to_json()))
    else:
        print(compare_output.scale_table(comparison) if scale else compare_output.compare_table(comparison))
        print()
        print(compare_charts.scale_charts(comparison) if scale else compare_charts.compare_charts(comparison))
    if out is not None and suffix is not None:  # _out_suffix gave one for every --out
        try:
            write_atomic(out, compare_output.file_text(comparison, suffix))
            png = compare_output.png_bytes(comparison)
            if png is None:
                print("mgpu-tui: no chart image (pip install matplotlib for one)", file=sys.stderr)
            else:
                write_atomic(Path(out).with_suffix(".png"), png)
        except OSError as exc:
            print(f"mgpu-tui: cannot write {out}: {exc.strerror or exc}", file=sys.stderr)
            return ExitCode.FAILED
        print(
            f"mgpu-tui: wrote {out}" + ("" if png is None else f" and {Path(out).with_suffix('.png')}"),
            file=sys.stderr,
        )
    if code is not None:
        return code
    return ExitCode.FAILED if comparison.failed else ExitCode.OK


def compare_command(args: argparse.Namespace) -> int:
    suffix = _out_suffix(args.out)
    if args.runs:
        if args.modes:
            raise UsageError("give MODEs to run, or --runs with the folders of finished runs, not both.")
        return _compare_records(args, suffix)
    if not args.modes:
        raise UsageError("give the MODEs to compare, or --runs with the folders of finished runs.")
    if len(set(args.modes)) != len(args.modes):
        raise UsageError("a mode is named twice; name each mode once.")
    template = _template(args, args.nproc, args.batch_size)
    specs = compare.compare_specs(args.modes, template)
    comparison = compare.new_comparison(args.modes, template, parallel=args.parallel)
    progress = Progress(len(specs))
    runner = Runner(specs, comparison, host=host_module.probe(), on_update=progress.update)
    if args.parallel:
        print(
            "mgpu-tui: --parallel: the modes run at the same time and share this host; "
            "the figures are not a fair race",
            file=sys.stderr,
        )
    return _execute(runner, args.out, suffix, args.json)


def _compare_records(args: argparse.Namespace, suffix: str | None) -> int:
    """``compare --runs A B``: the table from the runs' own records; nothing is run."""
    from mgpu_tui.engine.compare.records import comparison_from_runs
    from mgpu_tui.engine.records.history import RecordError

    if len(set(args.runs)) != len(args.runs):
        raise UsageError("a run folder is named twice; name each once.")
    for given in map(Path, args.runs):  # a path that is no folder at all: said as such, not "no spec.json"
        if not given.is_dir():
            what = "is not a folder" if given.exists() else "does not exist"
            raise UsageError(f"{given} {what}: give the folders of finished runs (mgpu-tui runs lists them).")
    try:
        comparison = comparison_from_runs([Path(p) for p in args.runs])
    except RecordError as exc:
        raise UsageError(str(exc)) from None
    settings = comparison.settings
    for difference in settings.differences if isinstance(settings, compare.RunsSettings) else ():
        print(plain(f"mgpu-tui: not comparable: {difference}"), file=sys.stderr)
    return _report(comparison, args.out, suffix, args.json, code=None)


def scale_command(args: argparse.Namespace) -> int:
    suffix = _out_suffix(args.out)
    template = _template(args, None, args.batch_size[0], args.lr)
    specs = scaling.scale_specs(
        args.mode,
        args.nproc,
        args.batch_size,
        template,
        weak=args.weak,
        lr_rule=args.lr_rule,
        warmup_steps=args.warmup_steps,
    )
    sweep = scaling.sweep_of(args.nproc, args.batch_size, args.weak)
    comparison = compare.new_scaling(args.mode, specs, sweep, args.lr_rule)
    progress = Progress(len(specs))
    runner = Runner(specs, comparison, host=host_module.probe(), on_update=progress.update)
    return _execute(runner, args.out, suffix, args.json)
