"""``mgpu-tui --check``: run the diagnostic levels and collect one :class:`CheckReport`.

Level 1 reads the environment (``env_checks``). Level 2 starts N ranks once and
has them run the collectives, the bandwidth measurement and a smoke run of
every mode that can run here (``rank_checks``); a launch that dies is followed
by a new one for the tasks left, so one crashing mode does not hide the rest.
Level 3 adds, in the same launch, the all_reduce size sweep, the GPU copy
matrix, every mode's parameters checked against the baseline (the smoke runs
save them; the baseline is trained once) and a ddp scaling run over 1..N ranks
on subgroups.

Results are handed to ``on_result`` as they come, for progress on long work.
No rank outlives :meth:`CheckSuite.run`, however it ends.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from mgpu_tui.engine.checks.environment import Environment, gather, level_one
from mgpu_tui.engine.checks.expected_bandwidth import Expectation, expectation_for_gpus, graded
from mgpu_tui.engine.checks.rank_launch import COLLECTIVES, RankLaunch, check_name
from mgpu_tui.engine.checks.results import CheckReport, CheckResult, Status
from mgpu_tui.engine.launch.devices import check_gpus, choose_device, default_nproc
from mgpu_tui.engine.launch.errors import EnvironmentUnusable, SpecError
from mgpu_tui.engine.launch.options import RUN_ROOT
from mgpu_tui.engine.launch.spec import LaunchSpec, workload_of, workload_problem
from mgpu_tui.engine.machine import host as host_module
from mgpu_tui.engine.planning.modes import MODES, SCRIPT, availability, unknown_mode
from mgpu_tui.engine.protocol.rundir import RunDir, smoke_folder
from mgpu_tui.engine.run.figures.aggregate import read_events

LEVELS = (1, 2, 3)
MAX_LAUNCHES = 4  # one, and up to three more after crashes
# Smoke: a few steps, enough for the loss to fall on the synthetic task.
SMOKE_STEPS = 12


class EnvironmentUnusableForChecks(EnvironmentUnusable):
    """torch cannot be imported: no rank can start (exit code 3)."""


@dataclass(frozen=True)
class CheckOptions:
    level: int = 2
    nproc: int | None = None  # default: one per GPU, or 2 on the CPU
    device: str = "auto"
    require_gpus: int = 0
    run_root: Path = RUN_ROOT
    smoke_steps: int = SMOKE_STEPS
    bandwidth_bytes: int | None = None  # default: 16 MiB on the CPU, 256 MiB on GPUs
    modes: tuple[str, ...] | None = None  # smoke (and verify) only these; default: every mode
    environ: Mapping[str, str] | None = None
    share_gpus: bool = False  # ranks may share GPUs round-robin (over gloo), as run --share-gpus
    # What the smoke and verify runs train: the MLP, or a GPT with any shape fields changed (LaunchSpec's).
    model: str = "mlp"
    model_args: tuple[tuple[str, int], ...] = ()


class CheckSuite:
    def __init__(
        self,
        options: CheckOptions,
        on_result: Callable[[CheckResult], None] | None = None,
        on_progress: Callable[[str], None] | None = None,
    ) -> None:
        if options.level not in LEVELS:
            raise SpecError(f"--level must be 1, 2 or 3, got {options.level}.")
        unknown = [m for m in options.modes or () if m not in MODES]
        if unknown:
            raise SpecError(unknown_mode(unknown[0]))
        self.options = options
        self.on_result = on_result or (lambda result: None)
        self.on_progress = on_progress or (lambda text: None)
        self.report = CheckReport(level=options.level, nproc=None, device=options.device, model=options.model)
        self._launch: RankLaunch | None = None
        self._check_dir: RunDir | None = None
        # What the measured all_reduce busbw is graded against (expected_bandwidth.py), or why not.
        self._expected: tuple[Expectation | None, str] = (None, "CPU ranks: no GPU link to grade it against")

    # ---- the whole suite ----------------------------------------------------------------

    def run(self) -> CheckReport:
        try:
            self._run_levels()
        except KeyboardInterrupt:
            self.report.interrupted = True
            raise
        finally:
            self.close()
            self.report.ended_at = time.time()
            if self._check_dir is not None:
                self._check_dir.write_json(self._check_dir.check_report_path, self.report.to_json())
        return self.report

    def close(self) -> None:
        if self._launch is not None:
            self._launch.close()

    def _add(self, result: CheckResult) -> None:
        if result.name == "bandwidth:all_reduce":
            result = graded(result, *self._expected)
        self.report.results.append(result)
        self.on_result(result)

    def _run_levels(self) -> None:
        opts = self.options
        self.on_progress("reading the environment (torch is imported in a child process)")
        env = gather(opts.environ)
        for result in level_one(env, opts.require_gpus):
            self._add(result)
        device, nproc = self._placement(env)
        self.report.device, self.report.nproc = device, nproc
        self.report.shared_gpus = device == "cuda" and nproc > env.visible_gpus
        if self.report.shared_gpus:
            self._expected = (None, "ranks share GPUs over gloo: no GPU link is measured")
        elif device == "cuda":
            self._expected = expectation_for_gpus(nproc)
        if opts.level < 2:
            return
        if not env.torch.get("torch"):
            raise EnvironmentUnusableForChecks(
                f"torch cannot be imported ({env.torch.get('error')}), so no rank can start; see the README."
            )
        host = self._host(env)
        tasks = list(COLLECTIVES)
        measured = ["bandwidth:all_reduce"] + (["sweep:all_reduce"] if opts.level >= 3 else [])
        if nproc > 1:
            tasks += [f"bandwidth:{self._bandwidth_bytes(device)}"] + (["sweep"] if opts.level >= 3 else [])
        else:  # an all_reduce over one rank moves nothing: any figure would be the cost of a no-op
            for name in measured:
                self._add(
                    CheckResult(
                        name,
                        Status.SKIP,
                        "one rank: an all_reduce moves no data, so there is "
                        "no bandwidth to measure (--nproc 2 or more)",
                    )
                )
        if opts.level >= 3:
            tasks.append("copy_matrix")
        modes, skipped = self._smoke_modes(host, device, nproc)
        tasks += [f"smoke:{m}" for m in modes]
        for name, reason in skipped.items():
            self._add(CheckResult(f"smoke:{name}", Status.SKIP, reason))
        if opts.level >= 3:
            tasks += [f"verify:{m}" for m in modes]
            for scaled in (m for m in modes if MODES[m].check_scaling):
                if nproc > 1:
                    tasks.append(f"scaling:{scaled}")
                else:
                    self._add(
                        CheckResult(
                            f"scaling:{scaled}",
                            Status.SKIP,
                            "one rank: nothing to scale over (--nproc 2 or more)",
                        )
                    )
        check_dir = self._check_dir = RunDir.create(opts.run_root, "check")
        self.report.run_dir = str(check_dir.path)
        self._run_rank_tasks(tasks, host, device, nproc, check_dir)

    def _placement(self, env: Environment) -> tuple[str, int]:
        """The device and rank count, by the launch spec's own rules: each check rank takes a device."""
        opts = self.options
        host = self._host(env)
        device = choose_device(opts.device, host, opts.share_gpus)
        nproc = opts.nproc or default_nproc(SCRIPT, device, host)
        if nproc < 1:
            raise SpecError(f"--nproc must be at least 1, got {nproc}.")
        if device == "cuda":
            check_gpus(f"--check with --nproc {nproc}", nproc, host, opts.share_gpus)
        return device, nproc

    def _host(self, env: Environment) -> host_module.Host:
        """This machine as the ranks will find it: GPUs count only if torch can use them."""
        cuda = bool(env.torch.get("cuda_available"))
        note = env.nvml.detail
        if env.visible_gpus and not cuda:
            note = f"NVML sees {env.visible_gpus} GPU(s), but this torch cannot use CUDA (a CPU build?)"
        return host_module.Host(
            cpu_count=env.cpu_count,
            gpu_count=env.visible_gpus if cuda else 0,
            gpu_note=note,
            torch_available=True,
        )

    def _bandwidth_bytes(self, device: str) -> int:
        return self.options.bandwidth_bytes or (256 * 2**20 if device == "cuda" else 16 * 2**20)

    def _smoke_modes(self, host, device: str, nproc: int) -> tuple[list[str], dict[str, str]]:
        """The modes that can run here with ``nproc`` ranks (one-process modes first; a mode with an
        RPC agent beside its group last)."""
        runnable, skipped = [], {}
        for mode in MODES.values():
            if self.options.modes is not None and mode.name not in self.options.modes:
                continue
            needed = mode.gpus_needed(nproc if mode.multi_process else 1)
            shared = self.options.share_gpus and device == "cuda"  # any GPU count will do
            if not availability(mode, host).runnable and not shared:
                skipped[mode.name] = availability(mode, host).reason
            elif mode.multi_process and nproc < mode.min_nproc:
                skipped[mode.name] = f"needs at least {mode.min_nproc} ranks; --nproc {nproc}"
            elif why := self._unfit_model(mode, nproc):
                skipped[mode.name] = why
            elif device == "cuda" and needed > host.gpu_count and not shared:
                skipped[mode.name] = (
                    f"needs {needed} GPUs with --nproc {nproc}; {host.gpu_count} visible "
                    "(--share-gpus lets ranks share them)"
                )
            else:
                runnable.append(mode.name)
        runnable.sort(key=lambda m: (MODES[m].multi_process, MODES[m].rpc_agent))
        return runnable, skipped

    def _unfit_model(self, mode, nproc: int) -> str | None:
        """Why ``mode`` cannot train --model over ``nproc`` ranks, as `run` would say it."""
        spec = LaunchSpec(
            mode=mode.name, nproc=nproc, model=self.options.model, model_args=self.options.model_args
        )
        return workload_problem(mode, spec, workload_of(spec), nproc)

    # ---- the rank launches ------------------------------------------------------------

    def _run_rank_tasks(self, tasks: list[str], host, device: str, nproc: int, check_dir: RunDir) -> None:
        pending = list(tasks)
        launches = 0
        while pending:
            if launches == MAX_LAUNCHES:
                for task in pending:
                    self._add(
                        CheckResult(
                            check_name(task),
                            Status.SKIP,
                            f"not run: {MAX_LAUNCHES} launches of the ranks failed before it",
                        )
                    )
                return
            launches += 1
            launch = self._launch = RankLaunch(
                pending,
                host,
                device,
                nproc,
                check_dir,
                self.options,
                on_result=self._add,
                on_progress=self.on_progress,
                judge=lambda task, record, device: self._judge(task, record, device, check_dir),
            )
            outcome = launch.run()
            if outcome.failed is None:
                return
            if not outcome.started_any:
                # The ranks never got going: every task would fail the same way.
                for task in pending:
                    self._add(
                        CheckResult(
                            check_name(task), Status.FAIL, f"the ranks did not start: {outcome.failure}"
                        )
                    )
                return
            seconds = time.monotonic() - outcome.current_started if outcome.current_started else 0.0
            self._add(CheckResult(check_name(outcome.failed), Status.FAIL, outcome.failure, {}, seconds))
            at = pending.index(outcome.failed)
            pending = [t for t in pending[at + 1 :] if t not in outcome.finished]
            if outcome.failed.startswith("smoke:"):  # nothing of it to verify
                mode = outcome.failed.partition(":")[2]
                if f"verify:{mode}" in pending:
                    pending.remove(f"verify:{mode}")
                    self._add(CheckResult(f"verify:{mode}", Status.SKIP, "its smoke run failed"))
            if pending:
                self.on_progress(f"starting the ranks again for the {len(pending)} check(s) left")

    # ---- reading a task's result ----------------------------------------------------------

    def _judge(self, task: str, record: dict, device: str, check_dir: RunDir) -> CheckResult:
        name = check_name(task)
        seconds = float(record.get("seconds", 0.0))
        if task.startswith("smoke:"):
            mode = task.partition(":")[2]
            return judge_smoke(mode, smoke_folder(check_dir.smoke_dir, mode), seconds, device)
        return CheckResult(
            name, Status(record["status"]), record.get("detail", ""), record.get("metrics", {}), seconds
        )


def judge_smoke(mode: str, smoke_dir: Path, seconds: float, device: str) -> CheckResult:
    """A smoke run passes when every step's global-batch loss is finite and the loss falls."""
    aggregator = read_events(smoke_dir)
    steps, _, reported = aggregator.series()
    stats = aggregator.stats()
    name = f"smoke:{mode}"
    metrics = {
        "steps": len(steps),
        "samples_per_s": stats.samples_per_s,
        "first_loss": reported[0] if reported else None,
        "final_loss": reported[-1] if reported else None,
    }
    losses = [v for v in reported if v is not None]
    if not reported or len(losses) != len(reported):
        return CheckResult(
            name, Status.FAIL, f"no loss reported for every step ({len(steps)} steps seen)", metrics, seconds
        )
    if not all(math.isfinite(v) for v in losses):
        bad = next(s for s, v in zip(steps, losses) if not math.isfinite(v))
        return CheckResult(name, Status.FAIL, f"the loss is not finite from step {bad}", metrics, seconds)
    k = min(3, len(losses) // 2) or 1
    early, late = statistics.fmean(losses[:k]), statistics.fmean(losses[-k:])
    detail = f"{len(steps)} steps, loss {losses[0]:.3f} -> {losses[-1]:.3f}"
    if MODES[mode].cpu_path == "degenerate" and device == "cpu":
        detail += " (degenerate on the CPU)"
    if not late < early:
        return CheckResult(name, Status.FAIL, f"the loss did not fall: {detail}", metrics, seconds)
    return CheckResult(name, Status.PASS, detail, metrics, seconds)
