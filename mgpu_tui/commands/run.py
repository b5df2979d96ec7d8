"""``mgpu-tui run``: start a mode headless, show live progress, summarise, exit with its status."""

from __future__ import annotations

import argparse
import dataclasses
import os
import signal
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from mgpu_tui.commands.launchers.foreground import SignalsPassed, exit_status, foreground
from mgpu_tui.commands.launchers.slurm import bind_task_gpu, from_slurm, why_slurm_stopped
from mgpu_tui.commands.workload import model_fields
from mgpu_tui.console import fmt_loss, fmt_rank_loss, fmt_rate, plain, redraw
from mgpu_tui.engine.launch import options
from mgpu_tui.engine.launch.priority import UI_RANK_NICE
from mgpu_tui.engine.launch.spec import LaunchSpec
from mgpu_tui.engine.nodes.endpoint import exposure_warning, resolve_endpoint
from mgpu_tui.engine.protocol.folder import dumps as strict_json
from mgpu_tui.engine.protocol.text import short_line
from mgpu_tui.engine.run.figures.aggregate import RunStats
from mgpu_tui.engine.run.lifecycle import Run
from mgpu_tui.engine.run.watched import RunState
from mgpu_tui.errors import ExitCode, UsageError, interrupt_on_term_and_hup, terminated
from mgpu_tui.parser import METRICS_OPTIONS
from mgpu_tui.reports.rank_output import RankOutput, last_lines, parse_ranks_filter
from mgpu_tui.reports.run_news import RunNews
from mgpu_tui.reports.run_summary import slowest_and_fastest, summary_text

if TYPE_CHECKING:
    from mgpu_tui.engine.metrics.server import MetricsServer

_EXIT = {
    RunState.OK: ExitCode.OK,
    RunState.FAILED: ExitCode.FAILED,
    RunState.INTERRUPTED: ExitCode.INTERRUPTED,
}


EACH_RANK_AT_MOST = 8  # ranks the progress line names one by one; past that, the outliers


def _outliers(stats: RunStats, silent: dict[int, float]) -> str:
    """The ranks of a large job in one short phrase: their step range, the slowest and the fastest
    rank, and the silent ones (the first three named)."""
    steps = [r.last_step for r in stats.ranks]
    said = [f"{len(stats.ranks)} ranks at steps {min(steps)}-{max(steps)}"]
    if outliers := slowest_and_fastest(stats.ranks):
        slow, fast = outliers
        slowest = f"slowest r{slow.rank} {fmt_rate(slow.samples_per_s)}/s"
        said.append(f"{slowest}, fastest r{fast.rank} {fmt_rate(fast.samples_per_s)}/s")
    if silent:
        named = ", ".join(f"r{rank} {s:.0f} s" for rank, s in sorted(silent.items())[:3])
        more = f" and {len(silent) - 3} more" if len(silent) > 3 else ""
        said.append(f"{len(silent)} silent ({named}{more})")
    return "; ".join(said)


class Progress:
    """One live line on stderr: rewritten in place on a terminal, every 10% of steps in a log."""

    def __init__(self, steps: int | None, stream=None, *, drawn: bool = True) -> None:
        self.steps = steps  # None: a script, which says none; its progress line shows no total
        self.stream = stream or sys.stderr  # the one of now, not of when this module loaded
        self.live = self.stream.isatty()
        self.drawn = drawn  # False: nothing between a command's own output, which is shown as written
        self._every = max(1, steps // 10) if steps else 10
        self._next_milestone = self._every
        self._last_draw = 0.0
        self.said_verifying = False

    def line(self, stats: RunStats, silent: dict[int, float] | None = None) -> str:
        silent = silent or {}
        if len(stats.ranks) > EACH_RANK_AT_MOST:
            ranks = _outliers(stats, silent)
        else:
            ranks = "  ".join(
                f"r{r.rank} {r.last_step} {fmt_rank_loss(r.loss, r.diverged_at)}"
                + (f" silent {silent[r.rank]:.0f} s" if r.rank in silent else "")
                for r in stats.ranks
            )
        total = f"/{self.steps}" if self.steps else ""
        return (
            f"step {stats.steps}{total}  {fmt_rate(stats.samples_per_s)} samples/s  "
            f"loss {fmt_loss(stats.final_loss)}  |  {ranks}"
        )

    def update(self, run: Run) -> None:
        if not self.drawn:
            return
        now = time.monotonic()
        if self.live:
            if now - self._last_draw >= 0.2 or run.state.finished:
                silent = {r.rank: r.silent_s for r in run.silent}
                redraw(self.stream, self.line(run.stats(), silent))
                self.stream.flush()
                self._last_draw = now
            return
        stats = run.stats()
        if stats.steps >= self._next_milestone:
            print(self.line(stats), file=self.stream, flush=True)
            while self._next_milestone <= stats.steps:
                self._next_milestone += self._every

    def end(self) -> None:
        if self.live and self.drawn:
            self.stream.write("\n")
            self.stream.flush()

    def clear(self) -> None:
        """Take the live line away (it is drawn again at the next update): lines print above it."""
        if self.live and self.drawn:
            redraw(self.stream)
            self._last_draw = 0.0


def _passthrough(args: argparse.Namespace) -> list[str]:
    """The demo flags the CLI takes itself but the engine only passes on (a mode's own flags, as
    engine/launch/options.py declares them)."""
    try:
        mode_flags = options.mode_flags(args)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    out = []
    for option, value in (("--seed", args.seed), ("--amp-dtype", args.amp_dtype)):
        if value is not None:
            out += [option, str(value)]
    return out + mode_flags


def _program_args(args: argparse.Namespace, demo_args: list[str]) -> list[str]:
    """The arguments for what runs: a mode's demo flags, or a script's own arguments untouched."""
    choices = (("MODE", args.mode), ("--script", args.script), ("--module", args.module))
    chosen = [name for name, given in choices if given]
    if len(chosen) != 1:
        raise UsageError("give a MODE, --script PATH or --module NAME: exactly one of them.")
    if args.mode:
        return _passthrough(args) + demo_args
    flags = (
        ("--verify", args.verify),
        ("--amp", args.amp),
        ("--accum", args.accum != 1),
        ("--lr", args.lr is not None),
        ("--warmup-steps", args.warmup_steps != 0),
        ("--seed", args.seed is not None),
    )
    demo_only = [flag for flag, given in flags if given]
    if demo_only:
        raise UsageError(f"{', '.join(demo_only)} are for the modes; pass your script's own flags after --.")
    return demo_args


def _ranks_filter(args: argparse.Namespace) -> frozenset[int] | None:
    try:
        return parse_ranks_filter(getattr(args, "ranks_filter", None))
    except ValueError:
        got = args.ranks_filter
        raise UsageError(f"--ranks-filter: give rank numbers separated by commas, got {got!r}.") from None


def _rank_output(
    args: argparse.Namespace, spec: LaunchSpec, ranks: frozenset[int] | None, progress: Progress
) -> RankOutput | None:
    """The ranks' own output on the console: every rank's for your own program, none for a mode
    (its demo's lines are in the progress and the logs) unless --ranks-filter names some."""
    if args.quiet or (ranks is None and not spec.program):
        return None
    return RankOutput(
        ranks=ranks,
        rank_offset=spec.node_rank * (spec.nproc or 1),
        json_stdout=args.json,
        clear_progress=progress.clear,
    )


def launch_nice(args: argparse.Namespace) -> int:
    """--nice as given, else 10 with --tui (the screen answers keys while the ranks fill the cores)."""
    return args.nice if args.nice is not None else (UI_RANK_NICE if args.tui else 0)


def run_command(args: argparse.Namespace, demo_args: list[str]) -> int:
    program_args = _program_args(args, demo_args)
    job, from_slurm_said = from_slurm(args)
    bind_task_gpu(job)
    spec = LaunchSpec(
        **{
            **options.spec_values(args),  # every declared option (engine/launch/options.py)
            "mode": args.mode or "script",
            "script": args.script,
            "module": args.module,
            "nice": launch_nice(args),
            "verify": args.verify,
            "demo_args": tuple(program_args),
            "instrument": not getattr(args, "no_instrument", False),
            "slurm": job,
            **model_fields(args),
        }
    )
    return follow(spec, args, (from_slurm_said,) if from_slurm_said else ())


def _say_start(run: Run, spec: LaunchSpec, said: tuple[str, ...]) -> None:
    """What runs, on how many ranks, where its folder is; what came from where; this node's part."""
    resolved = run.resolved
    program = short_line(spec.program, 160) if spec.program else None
    group = f" ({resolved.process_group})" if resolved.process_group else ""
    what = program if program else f"{resolved.mode.name}, {resolved.device}{group},"
    ranks_said = (
        f"on {resolved.world_size} rank(s)"
        if resolved.world_size is not None
        else "(its ranks are counted as its processes join a process group)"
    )
    print(plain(f"mgpu-tui: {what} {ranks_said}; run directory {run.run_dir.path}"), file=sys.stderr)
    for line in said:
        print(plain(f"mgpu-tui: {line}"), file=sys.stderr)
    if role := run.node_role():
        print(plain(f"mgpu-tui: {role}"), file=sys.stderr)
        if spec.rdzv_endpoint and (warning := exposure_warning(resolve_endpoint(spec.rdzv_endpoint))):
            print(f"mgpu-tui: {warning}", file=sys.stderr)


def start_metrics(args: argparse.Namespace, linger: bool = True) -> MetricsServer | None:
    """--metrics-port (or $MGPU_METRICS_PORT): the endpoint, bound before anything starts (a port
    in use: one sentence, exit 3); None when not asked for. ``linger``: the command keeps serving
    after the run ends (--metrics-linger); the app serves for as long as it is open."""
    names = METRICS_OPTIONS if linger else METRICS_OPTIONS[:2]
    try:
        options.from_environment(args, names, os.environ)
    except ValueError as exc:
        raise UsageError(f"{exc}.") from None
    if args.metrics_port is None:
        return None
    from mgpu_tui.engine.metrics.server import DEFAULT_LINGER_S, MetricsServer

    lingering = getattr(args, "metrics_linger", None)
    server = MetricsServer(
        args.metrics_port,
        args.metrics_address or "127.0.0.1",
        DEFAULT_LINGER_S if lingering is None else lingering,
    )
    server.start()
    print(plain(f"mgpu-tui: metrics for Prometheus at {server.url}"), file=sys.stderr)
    return server


def serve_final(metrics: MetricsServer) -> None:
    """Keep the run's final metrics served for --metrics-linger seconds (Ctrl-C ends it), then stop."""
    signal.signal(signal.SIGINT, signal.default_int_handler)  # (a stop asked once ignores it)
    interrupt_on_term_and_hup()
    try:
        if metrics.linger_s > 0:
            print(
                plain(f"mgpu-tui: the final metrics stay at {metrics.url} for {metrics.linger_s:g} s"),
                file=sys.stderr,
            )
            metrics.linger()
    except KeyboardInterrupt:
        pass
    finally:
        metrics.close()


def follow(
    spec: LaunchSpec, args: argparse.Namespace, said: tuple[str, ...] = (), *, as_bare: bool = False
) -> int:
    """Run ``spec`` as `run` does (and `torchrun`): the console's progress, the ranks' output, the
    summary, the exit code. ``args``: the watch options (parser.add_watch_options); ``said``: lines
    to print once the run has its folder (what came from where). ``as_bare``: a launch line the user
    wrote (exec, the torchrun drop-in), run in the foreground as a shell runs it, and ended with its
    own exit status (commands/launchers/foreground.py)."""
    if args.tui:
        from mgpu_tui.commands.tui import tui_command

        if args.json:
            raise UsageError("--json and --tui do not go together.")
        return tui_command(spec, metrics=start_metrics(args, linger=False))
    ranks = _ranks_filter(args)
    metrics = start_metrics(args)
    try:
        code = _follow_to_end(spec, args, said, ranks, metrics, as_bare)
    except BaseException:
        if metrics is not None:
            metrics.close()
        raise
    if metrics is not None:
        serve_final(metrics)
    return code


def _follow_to_end(
    spec: LaunchSpec,
    args: argparse.Namespace,
    said: tuple[str, ...],
    ranks: frozenset[int] | None,
    metrics: MetricsServer | None,
    as_bare: bool,
) -> int:
    bare = foreground(args, command=bool(spec.command)) if as_bare else None
    # Bad input raises: cli.main turns it into its sentence and exit code.
    run = Run.prepare(spec, foreground=bare)

    # A command's own output goes to the console as it wrote it: no line of mgpu-tui's drawn over it.
    shown_raw = bare is not None and bare.stderr is not None
    progress = Progress(None if spec.program else spec.steps, drawn=not shown_raw)
    output = None if bare is not None and spec.command else _rank_output(args, spec, ranks, progress)
    _say_start(run, spec, said)
    news = RunNews(progress, output)

    def on_poll(run: Run) -> None:
        news.on_poll(run)
        if metrics is not None:
            metrics.publish(run)

    if bare is not None:
        _follow_in_foreground(run, spec, news, on_poll)
    else:
        _follow(run, spec, progress, on_poll)
    summary = run.result()
    if metrics is not None:
        metrics.publish(run, force=True)  # the end as it is, however it came (a stop, Ctrl-C)
    cause = summary.root_cause
    launcher = cause is not None and cause.rank is None and cause.trainer is None and not cause.verdict
    if shown_raw and cause is not None and launcher and summary.exit_code is not None:
        # The command's own words are on the console already (its output went there as it wrote it):
        # its failure said once, not quoted again under the summary (`exec -- bash nope.sh`).
        words = f"the command exited with code {summary.exit_code} (its own output is above)"
        cause = dataclasses.replace(cause, message=words, traceback="", hint=None)
    shown = summary if cause is summary.root_cause else dataclasses.replace(summary, root_cause=cause)
    print(strict_json(summary.to_json()) if args.json else summary_text(shown))
    # The cause first (a rank's words: text only), then what the ranks printed last: with no step,
    # those last lines are the rest of the story (the others' "Connection closed by peer" after it).
    if cause is not None and cause is summary.root_cause:
        print(plain(cause.describe()), file=sys.stderr)
    verdict = summary.root_cause is not None and summary.root_cause.verdict  # it says why on its own
    stepped = summary.steps or any(t.last_step for t in summary.trainers)
    if not stepped and not args.json and not verdict and not shown_raw:  # (shown: said already)
        print("mgpu-tui: no rank reported a step; what each printed last:", file=sys.stderr)
        last = last_lines(run.run_dir, spec.node_rank * (spec.nproc or 1), command=bool(spec.command))
        print("\n".join(last), file=sys.stderr)
    if bare is not None and (status := exit_status(summary.exit_code)) is not None:
        return status  # the job's own, as a prefix returns it
    if summary.verify and not summary.verify.ok:
        print(plain(f"mgpu-tui: verification failed: {summary.verify.describe()}"), file=sys.stderr)
        return ExitCode.FAILED
    return _EXIT[run.state]


def _follow(run: Run, spec: LaunchSpec, progress: Progress, on_poll: Callable[[Run], None]) -> None:
    """A run in a session of its own: a Ctrl-C, SIGTERM or SIGHUP stops it in order."""
    interrupt_on_term_and_hup()
    with run:
        try:
            run.start()
            run.wait(on_poll=on_poll)
        except KeyboardInterrupt:
            # A second Ctrl-C (or Slurm's SIGTERM to every process) must not abandon the ranks half-stopped.
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            progress.end()
            by = why_slurm_stopped(spec.slurm) if terminated() else None
            ended = spec.slurm.describe(by) if spec.slurm and by else "interrupted"
            print(plain(f"mgpu-tui: {ended}; stopping every rank"), file=sys.stderr)
            run.stop(stopped_by=by)
        else:
            if not progress.said_verifying:
                progress.end()


def _follow_in_foreground(run: Run, spec: LaunchSpec, news: RunNews, on_poll: Callable[[Run], None]) -> None:
    """A launch line in the foreground: its signals as a shell's job gets them, until it ends."""
    sys.stdout.flush()
    sys.stderr.flush()  # mgpu-tui's lines before the job's own, which go to the same terminal
    with run, SignalsPassed(run, spec.slurm) as signals:
        run.start()
        signals.started()
        run.wait(on_poll=on_poll)
    if not news.progress.said_verifying:
        news.progress.end()
