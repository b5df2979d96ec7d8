"""What every check uses: the run's folder, a command run with its output kept, the results and the
report, the machine's facts."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]  # the repository (this file: scripts/gpu_checks/base.py)


SCRIPT_PAIRS = 3  # the script check's pairs of runs, unless --pairs says


@dataclass
class Result:
    name: str
    ok: bool | None  # None: skipped
    detail: str
    seconds: float = 0.0
    metrics: dict = field(default_factory=dict)


class CheckerBase:
    def __init__(self, out: Path, jobs: int, python: str) -> None:
        self.out, self.jobs, self.python = out, jobs, python
        self.results: list[Result] = []
        self.gpus = 0
        self.runs_of_transformer: list[str] = []
        self.pairs = SCRIPT_PAIRS  # the script check's pairs of runs
        self.fr_gloo_run_dir: str | None = None  # fr-hang's run, whose dumps fr-versions reads

    def mgpu(self, *args: str) -> list[str]:
        return [self.python, "-m", "mgpu_tui", *args]

    def sh(
        self,
        name: str,
        argv: list[str],
        timeout: float = 300,
        env: dict | None = None,
        cwd: Path | None = None,
    ) -> subprocess.CompletedProcess:
        """Run argv, its output kept in out/<name>.log (and returned)."""
        done = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=cwd or self.out,
            env={**os.environ, **(env or {})},
        )
        (self.out / f"{name}.log").write_text(
            f"$ {' '.join(argv)}\n(exit {done.returncode})\n"
            f"--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
        )
        return done

    def write_report(self, machine: dict, started: float) -> None:
        report = {
            "machine": machine,
            "seconds": time.monotonic() - started,
            "passed": not any(r.ok is False for r in self.results),
            "results": [asdict(r) for r in self.results],
        }
        (self.out / "report.json").write_text(json.dumps(report, indent=1, default=str))

    def add(self, result: Result) -> None:
        self.results.append(result)
        verdict = {True: "PASS", False: "FAIL", None: "SKIP"}[result.ok]
        print(f"{verdict}  {result.name:<26} {result.seconds:6.1f} s  {result.detail}", flush=True)

    def machine(self) -> dict:
        smi = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
            capture_output=True,
            text=True,
        )
        probe = subprocess.run(
            [
                self.python,
                "-c",
                (
                    "import json, sys, torch; c = torch.cuda.is_available(); print(json.dumps({"
                    "'python': sys.version.split()[0], 'torch': torch.__version__, "
                    "'cuda': torch.version.cuda, "
                    "'nccl': '.'.join(map(str, torch.cuda.nccl.version())) if c else None, "
                    "'cuda_available': c, "
                    "'devices': torch.cuda.device_count() if c else 0}))"
                ),
            ],
            capture_output=True,
            text=True,
        )
        info: dict[str, Any] = {"gpus": [line.strip() for line in smi.stdout.splitlines() if line.strip()]}
        try:
            info.update(json.loads(probe.stdout.strip().splitlines()[-1]))
        except (IndexError, ValueError):
            info["torch_error"] = (probe.stderr.strip().splitlines() or ["no output"])[-1]
        return info


RESULT = re.compile(r"RESULT (\{.*\})")  # a framework job's own figures, printed as JSON


def result_line(text: str) -> dict | None:
    found = RESULT.findall(text)
    return json.loads(found[-1]) if found else None


def json_summary(stdout: str) -> dict | None:
    for line in reversed(stdout.strip().splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                return None
    return None


def script_log(summary: dict | None) -> str:
    if not summary:
        return ""
    logs = sorted(Path(summary["run_dir"]).glob("logs/*/attempt_*/0/stdout.log"))
    return logs[-1].read_text() if logs else ""


def last_summary(output: str):
    """The RunSummary of a ``run --json``'s output (its last line), or None."""
    from mgpu_tui.engine.run.summary import RunSummary  # the package: only once there is a GPU

    try:
        return RunSummary.from_json(json.loads(output.strip().splitlines()[-1]))
    except (IndexError, ValueError, KeyError, TypeError):
        return None
