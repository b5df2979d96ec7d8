"""One launch of the check ranks: start them, follow rank 0's results, notice a hang or a crash.

The ranks (``mgpu_tui.engine.rank.check_tasks``) run their tasks one after another and
write JSON lines to ``checks/rank<N>.jsonl``: rank 0 a "started" record before each task
and its result after it; a rank whose task raises writes the failure and exits. Each task
has a time budget; past it, the launch is stopped as hung. The suite (suite.py) decides
what to launch next.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from mgpu_tui.engine.checks.results import CheckResult
from mgpu_tui.engine.launch.spec import LaunchSpec, as_device
from mgpu_tui.engine.protocol.file_tail import FileTail
from mgpu_tui.engine.protocol.folder import read_capped
from mgpu_tui.engine.protocol.rundir import RunDir
from mgpu_tui.engine.run.lifecycle import Run
from mgpu_tui.engine.run.watched import RunState

RANK_MODULE = "mgpu_tui.engine.rank.check_tasks"
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast")
START_BUDGET_S = 90.0  # torchrun, torch imports and the rendezvous, on a loaded machine
TASK_BUDGET_S = {"sweep": 600.0, "copy_matrix": 300.0, "smoke": 120.0, "scaling": 300.0, "verify": 120.0}
DEFAULT_TASK_BUDGET_S = 60.0
SMOKE_BATCH_PER_RANK = 32  # divides into ranks and pipeline micro-batches


def budget(task: str) -> float:
    return TASK_BUDGET_S.get(task.partition(":")[0], DEFAULT_TASK_BUDGET_S)


@dataclass
class LaunchOutcome:
    finished: dict[str, dict] = field(default_factory=dict)  # task -> rank 0's result record
    failed: str | None = None  # the task that broke the launch
    failure: str = ""
    started_any: bool = False
    current_started: float = 0.0  # when the task in progress started (monotonic)
    run_dir: RunDir | None = None


class RankLaunch:
    def __init__(
        self,
        tasks: list[str],
        host,
        device: str,
        nproc: int,
        check_dir: RunDir,
        options,
        *,
        on_result: Callable[[CheckResult], None],
        on_progress: Callable[[str], None],
        judge: Callable[[str, dict, str], CheckResult],
    ) -> None:
        self.tasks, self.host, self.device, self.nproc = tasks, host, device, nproc
        self.check_dir, self.options = check_dir, options
        self._add, self.on_progress, self._judge = on_result, on_progress, judge
        self.ranks: Run | None = None

    def close(self) -> None:
        if self.ranks is not None:
            self.ranks.close()

    def _rank_args(self) -> tuple[str, ...]:
        """The check ranks' own command line: their tasks, device, smoke runs and model."""
        tasks, device, nproc, opts = self.tasks, self.device, self.nproc, self.options
        args: tuple[str, ...] = (
            "--tasks",
            ",".join(tasks),
            "--device",
            device,
            "--steps",
            str(opts.smoke_steps),
            "--batch-size",
            str(SMOKE_BATCH_PER_RANK * nproc),
            "--smoke-dir",
            str(self.check_dir.smoke_dir),
        )
        if any(t.startswith("verify:") for t in tasks):
            args += ("--save-params",)
        if opts.share_gpus:
            args += ("--share-gpus",)
        if opts.model != "mlp":  # the demos' own flags, which the smoke runs pass on
            args += ("--model", opts.model)
            for name, value in opts.model_args:
                args += (f"--{name.replace('_', '-')}", str(value))
        return args

    def run(self) -> LaunchOutcome:
        tasks, host, device, nproc, opts = self.tasks, self.host, self.device, self.nproc, self.options
        args = self._rank_args()
        spec = LaunchSpec(
            mode="check",
            module=RANK_MODULE,
            instrument=False,  # mgpu-tui's own tasks, which report themselves
            nproc=nproc,
            device=as_device(device),
            run_root=self.check_dir.path,
            demo_args=args,
        )
        self.ranks = run = Run.prepare(spec, host, name="ranks", environ=opts.environ)
        outcome = LaunchOutcome(run_dir=run.run_dir)
        results = FileTail(run.run_dir.check_results_path(0))
        current: str | None = None  # the task rank 0 started last
        deadline = time.monotonic() + START_BUDGET_S + budget(tasks[0])
        self.on_progress(f"starting {nproc} rank(s) on {device} for {len(tasks)} check(s)")
        run.start()

        def take_new_records() -> None:
            nonlocal current, deadline
            for record in parse_records(results.read_lines()):
                if record.get("state") == "started":
                    current = record["task"]
                    outcome.started_any = True
                    outcome.current_started = time.monotonic()
                    deadline = time.monotonic() + budget(current)
                    if budget(current) > DEFAULT_TASK_BUDGET_S * 2:  # say so when it takes a while
                        self.on_progress(f"running {check_name(current)}")
                elif record.get("state") == "finished":
                    outcome.finished[record["task"]] = record
                    self._add(self._judge(record["task"], record, device))

        try:
            while not run.poll().finished:
                take_new_records()
                if time.monotonic() > deadline:
                    run.stop(grace=3)
                    outcome.failed = current or tasks[0]
                    outcome.failure = (
                        f"no answer within {budget(outcome.failed):g} s: a rank hangs "
                        f"(logs in {run.run_dir.path})"
                    )
                    break
                time.sleep(0.1)
        finally:
            run.close()
        take_new_records()
        results.close()
        if outcome.failed is not None or run.state is RunState.OK:
            return outcome
        # The launch died: the first failure any rank wrote wins; else the task in progress.
        failures = [
            r for p in run.run_dir.check_results() for r in read_records(p) if r.get("state") == "failed"
        ]
        if failures:
            first = min(failures, key=lambda r: r.get("t", math.inf))
            outcome.failed, outcome.failure = first["task"], first["detail"]
        else:
            # Tasks run one at a time: only the last one started can be unfinished.
            outcome.failed = current if current and current not in outcome.finished else tasks[0]
            cause = run.summary.root_cause if run.summary else None
            exit_code = run.summary.exit_code if run.summary else None
            outcome.failure = cause.message if cause else f"the ranks exited with {exit_code}"
        return outcome


def check_name(task: str) -> str:
    name, _, arg = task.partition(":")
    if name in COLLECTIVES:
        return f"collective:{name}"
    if name == "bandwidth":
        return "bandwidth:all_reduce"
    if name == "sweep":
        return "sweep:all_reduce"
    return task


def parse_records(lines) -> list[dict]:
    records = []
    for line in lines:
        try:
            records.append(json.loads(line))
        except ValueError:
            break  # a line still being written
    return records


def read_records(path: Path) -> list[dict]:
    try:
        return parse_records(read_capped(path, 16 << 20).splitlines())
    except OSError:
        return []
