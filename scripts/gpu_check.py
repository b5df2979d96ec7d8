"""Validate every CUDA path of mgpu-tui on this machine's GPUs: `make gpu-check`.

    make gpu-check                                   # or: .venv/bin/python scripts/gpu_check.py
    .venv/bin/python scripts/gpu_check.py --only modes,oom --out /tmp/gpu-check
    .venv/bin/python scripts/gpu_check.py --only script --pairs 5    # more pairs: a steadier ratio

Prints the machine (GPU, driver, CUDA, torch, NCCL), then one PASS/FAIL line per check:

    check-level3   mgpu-tui --check --level 3 --require-gpus 1
    check-shared   mgpu-tui --check --nproc 2 --share-gpus (a one-GPU box: every multi-rank path)
    modes          every mode with --device cuda --verify, in float32, fp16 (GradScaler) and bf16;
                   two ranks for the multi-process modes, sharing GPUs where the box has too few
    oom            the out-of-memory fault: named, no rank left, the GPU's memory free again (NVML)
    compare        `mgpu-tui compare` on the GPU: every row ok, TFLOP/s and MFU from the GPU's peak
    transformer    gpt-125m and gpt-1.3b in bf16 and fp16: tokens/s, MFU against the datasheet peak,
                   the allocator's peak against the plan; the energy counter against nvidia-smi's power
    nccl           a one-rank NCCL job's own log read by `mgpu-tui nccl` and by the summary; two NCCL
                   ranks on one GPU refused (a known limit, recorded)
    script         an unchanged GPT script with torch.compile through `run --script` and the torchrun
                   drop-in, against --no-instrument and bare torchrun: speed, figures, graph breaks
    fr-hang        ranks sharing the GPU over gloo, one stuck: the verdict and torch's fr_trace
    topology       `mgpu-tui topo` against `nvidia-smi topo -m` on this box: the same matrix
    telemetry      the sampler against `nvidia-smi --query-gpu` at the same moments, under load
    sampler-cost   what one telemetry sample costs with the real driver, and NVML's slow calls
    app            the app in tmux for 30 s with a run on the GPU; the screen is checked and kept,
                   and an SVG of the Run view is saved (Textual's screenshot, gpu-run-view.svg)
    launchers, script-mfu, input-bound, fr-versions, speed, gpt13b-profile
                   the third round's (scripts/gpu_round3.py says what each does)

Every command's output goes to --out (default runs/gpu-check-<time>/) with report.json.
Exit codes: 0 every check passed, 1 a check failed, 2 usage, 3 no NVIDIA GPU (or no CUDA torch).
The mode runs go several at a time (--jobs): their timings are not the point here.
This file needs only the standard library until it knows there is a GPU.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from mgpu_tui.engine.planning.modes import MODES as CATALOGUE
from mgpu_tui.engine.protocol.rundir import RunDir

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_round3 import Round3  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
MODES = tuple(CATALOGUE)  # every mode of the catalogue
PRECISIONS = {
    "float32": [],
    "fp16": ["--amp", "--amp-dtype", "fp16"],
    "bf16": ["--amp", "--amp-dtype", "bf16"],
}
STEPS = 30  # enough for the runs to drift apart if a mode trained another function
CHECKS = (
    "check-level3",
    "check-shared",
    "modes",
    "oom",
    "compare",
    "transformer",
    "nccl",
    "script",
    "fr-hang",
    "topology",
    "telemetry",
    "sampler-cost",
    "app",
    "launchers",
    "script-mfu",
    "input-bound",
    "fr-versions",
    "speed",
    "gpt13b-profile",
)
# The transformer runs: (model, global batch, steps, autocast dtype, modes), each on one GPU. gpt-1.3b
# in bf16 is the largest GPT that trains on one 80 GB GPU with SGD (47 GiB planned at batch 8).
TRANSFORMER_RUNS = (
    ("gpt-1.3b", 8, 20, "bf16", ("single", "ddp", "fsdp")),
    ("gpt-1.3b", 8, 20, "fp16", ("single",)),
    ("gpt-125m", 16, 30, "bf16", ("single", "ddp", "fsdp")),
    ("gpt-125m", 16, 30, "fp16", ("single",)),
)
ENERGY_TOLERANCE = 0.10  # NVML's energy counter against nvidia-smi's power integrated, 4 readings a second
# The unchanged script on the GPU: a GPT big enough that a step is not launch-bound, compiled.
SCRIPT_ARGS = [
    "--compile",
    "--n-layer", "6", "--n-embd", "512", "--n-head", "8", "--block-size", "256",
    "--batch-size", "32", "--grad-accum", "2", "--max-iters", "60",
    "--eval-interval", "30", "--eval-iters", "4",
]  # fmt: skip
SCRIPT_PAIRS = 3
ITER_LINE = re.compile(r"iter (\d+): loss ([\d.]+), time ([\d.]+)ms(?:, mem ([\d.]+)MiB)?")
# Telemetry against nvidia-smi, read a fraction of a second apart: how far each field may differ.
TOLERANCE = {"memory_used_mib": 256, "util_pct": 15, "temperature_c": 3, "power_w_rel": 0.15}


@dataclass
class Result:
    name: str
    ok: bool | None  # None: skipped
    detail: str
    seconds: float = 0.0
    metrics: dict = field(default_factory=dict)


class Checker(Round3):
    Result = Result

    def __init__(self, out: Path, jobs: int, python: str) -> None:
        self.out, self.jobs, self.python = out, jobs, python
        self.results: list[Result] = []
        self.gpus = 0
        self.runs_of_transformer: list[str] = []
        self.pairs = SCRIPT_PAIRS  # the script check's pairs of runs
        self.fr_gloo_run_dir: str | None = None  # fr-hang's run, whose dumps fr-versions reads

    # ---- helpers --------------------------------------------------------------------

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

    # ---- the machine ------------------------------------------------------------------

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
        info = {"gpus": [line.strip() for line in smi.stdout.splitlines() if line.strip()]}
        try:
            info.update(json.loads(probe.stdout.strip().splitlines()[-1]))
        except (IndexError, ValueError):
            info["torch_error"] = (probe.stderr.strip().splitlines() or ["no output"])[-1]
        return info

    # ---- the checks ----------------------------------------------------------------

    def check_level3(self) -> Result:
        start, report = time.monotonic(), self.out / "check-level3.json"
        done = self.sh(
            "check-level3",
            self.mgpu(
                "--check",
                "--level",
                "3",
                "--require-gpus",
                "1",
                "--json",
                str(report),
                "--run-dir",
                str(self.out / "runs"),
            ),
            600,
        )
        return self._suite_result("check-level3", done, report, time.monotonic() - start)

    def check_shared(self) -> Result:
        if self.gpus >= 2:
            return Result("check-shared", None, f"{self.gpus} GPUs: check-level3 runs a rank on each already")
        start, report = time.monotonic(), self.out / "check-shared.json"
        done = self.sh(
            "check-shared",
            self.mgpu(
                "--check",
                "--nproc",
                "2",
                "--share-gpus",
                "--json",
                str(report),
                "--run-dir",
                str(self.out / "runs"),
            ),
            600,
        )
        return self._suite_result("check-shared", done, report, time.monotonic() - start)

    def _suite_result(self, name: str, done, report: Path, seconds: float) -> Result:
        try:
            data = json.loads(report.read_text())
        except (OSError, ValueError):
            return Result(name, False, f"no report (exit {done.returncode}); see {name}.log", seconds)
        failed = [c["name"] for c in data["checks"] if c["status"] == "fail"]
        counts = data["counts"]
        detail = (
            f"exit {done.returncode}: {counts['pass']} pass, {counts['fail']} fail, "
            f"{counts['skip']} skip, {counts['warn']} warn"
            + (f"; failed: {', '.join(failed)}" if failed else "")
        )
        return Result(name, done.returncode == 0, detail, seconds, {"counts": counts, "failed": failed})

    def mode_runs(self) -> list[Result]:
        jobs = [(mode, precision) for precision in PRECISIONS for mode in MODES]
        with concurrent.futures.ThreadPoolExecutor(self.jobs) as pool:
            return list(pool.map(lambda job: self._mode_run(*job), jobs))

    def _mode_run(self, mode: str, precision: str) -> Result:
        name = f"verify:{mode}:{precision}"
        only = CATALOGUE[mode].cuda_amp_dtype
        if PRECISIONS[precision] and only not in (None, precision):
            return Result(
                name, None, f"{mode} trains mixed precision in {only} only (the catalogue's cuda_amp_dtype)"
            )
        start = time.monotonic()
        argv = [
            "run",
            mode,
            "--device",
            "cuda",
            "--steps",
            str(STEPS),
            "--verify",
            "--json",
            "--run-dir",
            str(self.out / "runs"),
            *PRECISIONS[precision],
        ]
        multi = CATALOGUE[mode].multi_process
        if multi:
            argv += ["--nproc", "2"]
        if CATALOGUE[mode].gpus_needed(2 if multi else 1) > self.gpus:
            argv.append("--share-gpus")
        done = self.sh(name.replace(":", "-"), self.mgpu(*argv), 300)
        seconds = time.monotonic() - start
        summary = last_summary(done.stdout)
        if summary is None:
            tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
            return Result(name, False, f"exit {done.returncode}: {tail}", seconds)
        shared = " (ranks share GPUs)" if summary.shared_gpus else ""
        if summary.status != "ok" or summary.verify is None:
            cause = summary.root_cause.message if summary.root_cause else "no verification"
            return Result(name, False, f"{summary.status}: {cause}"[:300], seconds)
        verify = summary.verify
        if verify.error:
            return Result(name, False, verify.error, seconds)
        detail = (
            f"max abs diff {verify.max_abs_diff:.1e} (tolerance {verify.tolerance:.0e}), "
            f"{summary.world_size} rank(s){shared}"
        )
        metrics = {
            "max_abs_diff": verify.max_abs_diff,
            "max_rel_diff": verify.max_rel_diff,
            "tolerance": verify.tolerance,
            "samples_per_s": summary.samples_per_s,
            "peak_mem_bytes": list(summary.peak_mem_bytes),
            "shared_gpus": summary.shared_gpus,
            "world_size": summary.world_size,
        }
        return Result(name, verify.ok and done.returncode == 0, detail, seconds, metrics)

    def oom(self) -> list[Result]:
        from mgpu_tui.engine.machine import nvml

        nvml.status()  # initialise NVML in this process
        results = []
        for mode, extra in (
            ("single", []),
            ("ddp", ["--nproc", "2", "--share-gpus"] if self.gpus < 2 else ["--nproc", "2"]),
        ):
            name = f"oom:{mode}"
            start = time.monotonic()
            before = [nvml.readings(i, pcie=False).memory_used for i in range(self.gpus)]
            rank = "1" if CATALOGUE[mode].multi_process else "0"
            done = self.sh(
                name.replace(":", "-"),
                self.mgpu(
                    "run",
                    mode,
                    "--device",
                    "cuda",
                    "--steps",
                    "50",
                    "--json",
                    "--run-dir",
                    str(self.out / "runs"),
                    *extra,
                    "--",
                    "--fail-at-step",
                    "3",
                    "--fail-rank",
                    rank,
                    "--fail-kind",
                    "oom",
                ),
                300,
            )
            summary = last_summary(done.stdout)
            if summary is None or summary.root_cause is None:
                results.append(Result(name, False, f"no summary with a root cause (exit {done.returncode})"))
                continue
            cause = summary.root_cause
            pids = [r.pid for r in summary.ranks if r.pid]
            alive = [pid for pid in pids if Path(f"/proc/{pid}").exists()]
            time.sleep(1.0)  # the driver frees a dead process's memory as it reaps it
            after = [nvml.readings(i, pcie=False).memory_used for i in range(self.gpus)]
            on_gpu = [p for i in range(self.gpus) for p, _ in nvml.readings(i, pcie=False).processes]
            ours = [p for p in on_gpu if p in pids]
            grew = max((a - b) for a, b in zip(after, before)) if before else 0
            named = "OutOfMemoryError" in cause.message and str(cause.rank) == rank
            ok = done.returncode == 1 and named and not alive and not ours and grew <= 64 << 20
            detail = (
                f"exit {done.returncode}; root cause rank {cause.rank}: "
                f"{cause.message[:90]}; ranks alive after: {len(alive)}; "
                f"GPU memory used before {before[0] >> 20} MiB, after {after[0] >> 20} MiB"
            )
            results.append(
                Result(
                    name,
                    ok,
                    detail,
                    time.monotonic() - start,
                    {"before_bytes": before, "after_bytes": after, "alive": alive},
                )
            )
        return results

    def run_compare(self, name: str, argv: list[str], timeout: float) -> tuple[list[dict] | None, bool, int]:
        """``mgpu-tui compare ARGV`` with its report in out/NAME.json: (its rows, None without a report;
        whether it exited 0 with every row ok and an MFU between 0 and 1; its exit code)."""
        report = self.out / f"{name}.json"
        done = self.sh(
            name,
            self.mgpu("compare", *argv, "--run-dir", str(self.out / "runs"), "--out", str(report)),
            timeout,
        )
        try:
            rows = json.loads(report.read_text())["rows"]
        except (OSError, ValueError, KeyError):
            return None, False, done.returncode
        ok = done.returncode == 0 and all(r["status"] == "ok" and r["mfu"] and 0 < r["mfu"] < 1 for r in rows)
        return rows, ok, done.returncode

    def compare(self) -> Result:
        start = time.monotonic()
        share = ["--share-gpus"] if self.gpus < 2 else []
        argv = ["single", "ddp", "fsdp", "--device", "cuda", "--nproc", "2", "--steps", "200", *share]
        rows, ok, code = self.run_compare("compare", argv, 300)
        if rows is None:
            return Result("compare", False, f"no report (exit {code}); see compare.log")
        detail = "; ".join(
            f"{r['mode']} {r['samples_per_s'] or 0:,.0f} samples/s on {r['devices']} GPU(s), "
            f"{r['tflops_per_device'] or 0:.3f} TFLOP/s, MFU {100 * (r['mfu'] or 0):.3f}%"
            for r in rows
        )
        keep = ("mode", "samples_per_s", "devices", "tflops_per_device", "mfu")
        metrics = {"rows": [{k: r[k] for k in keep} for r in rows]}
        return Result("compare", ok, detail, time.monotonic() - start, metrics)

    def transformer(self) -> list[Result]:
        """GPTs on one GPU, each precision: the plan, then compare's rows (tokens/s, MFU against the
        datasheet's dense peak, the allocator's peak against the plan's total). nvidia-smi's power is
        read all the while, for the energy check (NVML's counter against its integral)."""
        power = PowerLog()
        power.start()
        results = []
        try:
            for model, batch, steps, precision, modes in TRANSFORMER_RUNS:
                results.append(self._transformer(model, batch, steps, precision, modes))
        finally:
            power.stop()
        (self.out / "nvidia-smi-power.json").write_text(json.dumps(power.samples))
        results.append(self._energy(power.samples))
        return results

    def _transformer(self, model: str, batch: int, steps: int, precision: str, modes: tuple) -> Result:
        name = f"transformer:{model}:{precision}"
        start = time.monotonic()
        shape = ["--model", model, "--batch-size", str(batch), "--amp"]
        planned = self.sh(f"plan-{model}", self.mgpu("plan", *shape, "--json"), 120)
        try:
            plan = {m["mode"]: m for m in json.loads(planned.stdout)["modes"]}
        except (ValueError, KeyError):
            return Result(name, False, f"no plan (exit {planned.returncode}); see plan-{model}.log")
        argv = [*modes, "--device", "cuda", "--nproc", "1", "--steps", str(steps), *shape]
        rows, ok, code = self.run_compare(name.replace(":", "-"), [*argv, "--amp-dtype", precision], 300)
        if rows is None:
            return Result(name, False, f"no report (exit {code}); see {name.replace(':', '-')}.log")
        measured = []
        for r in rows:
            rank0 = r["memory"][0] if r["memory"] else {}
            predicted, peak = rank0.get("predicted_total_bytes"), rank0.get("peak_bytes")
            self.runs_of_transformer.append(r["run_dir"])
            measured.append(
                {
                    "mode": r["mode"],
                    "status": r["status"],
                    "mfu": r["mfu"],
                    "tokens_per_s": r["tokens_per_s"],
                    "tflops_per_device": r["tflops_per_device"],
                    "step_time_s_median": r["step_time_s_median"],
                    "predicted_total_bytes": predicted,
                    "peak_bytes": peak,
                    "peak_vs_plan": peak / predicted - 1 if peak and predicted else None,
                    "tensor_peak_bytes": rank0.get("tensor_peak_bytes"),
                    "predicted_state_bytes": rank0.get("predicted_state_bytes"),
                    "measured_state_bytes": rank0.get("measured_state_bytes"),
                    "fits": plan.get(r["mode"], {}).get("fits"),
                    "final_loss": r["final_loss"],
                    "run_dir": r["run_dir"],
                    "root_cause": r["root_cause"],
                }
            )
        gib = 2**30
        detail = "; ".join(
            f"{m['mode']} {m['tokens_per_s'] or 0:,.0f} tokens/s, MFU {100 * (m['mfu'] or 0):.1f}%, peak "
            f"{(m['peak_bytes'] or 0) / gib:.2f} GiB vs plan "
            f"{(m['predicted_total_bytes'] or 0) / gib:.2f} GiB"
            + (f" ({100 * m['peak_vs_plan']:+.0f}%)" if m["peak_vs_plan"] is not None else "")
            for m in measured
        )
        return Result(name, ok, detail, time.monotonic() - start, {"rows": measured, "plan": plan})

    def _energy(self, power: list[list[float]]) -> Result:
        """Each transformer run's joules from NVML's total energy counter (its telemetry, first sample
        to last) against nvidia-smi's power.draw, read about 4 times a second and integrated over the
        same seconds."""
        start, checked = time.monotonic(), []
        for run_dir in self.runs_of_transformer:
            samples = []
            for line in RunDir(run_dir).telemetry_path.read_text().splitlines():
                record = json.loads(line)
                gpu = record["gpus"][0] if record.get("gpus") else {}
                if gpu.get("energy_mj") is not None:
                    samples.append((record["t"], gpu["energy_mj"]))
            if len(samples) < 2:
                continue
            (t0, e0), (t1, e1) = samples[0], samples[-1]
            inside = [(t, w) for t, w in power if t0 <= t <= t1]
            if len(inside) < 4 or t1 - t0 < 5:
                continue
            smi = sum((b[0] - a[0]) * (a[1] + b[1]) / 2 for a, b in zip(inside, inside[1:]))
            smi *= (t1 - t0) / (inside[-1][0] - inside[0][0])  # the edges, at the mean power
            summary = json.loads(RunDir(run_dir).summary_path.read_text())
            checked.append(
                {
                    "run": Path(run_dir).name,
                    "seconds": t1 - t0,
                    "counter_j": (e1 - e0) / 1000,
                    "summary_energy_j": summary["telemetry"]["gpus"][0]["energy_j"],
                    "nvidia_smi_j": smi,
                    "mean_power_w": (e1 - e0) / 1000 / (t1 - t0),
                }
            )
        if not checked:
            return Result("energy", False, "no transformer run had an energy counter and power readings")
        worst = max(abs(c["counter_j"] / c["nvidia_smi_j"] - 1) for c in checked)
        ok = worst <= ENERGY_TOLERANCE and all(
            c["summary_energy_j"] is not None and abs(c["summary_energy_j"] - c["counter_j"]) < 1
            for c in checked
        )
        detail = (
            f"{len(checked)} runs: "
            + "; ".join(
                f"{c['counter_j'] / 1000:.2f} kJ by the counter vs {c['nvidia_smi_j'] / 1000:.2f} kJ by "
                f"nvidia-smi over {c['seconds']:.0f} s ({c['mean_power_w']:.0f} W)"
                for c in checked[:4]
            )
            + f"; worst difference {100 * worst:.1f}% (<= {100 * ENERGY_TOLERANCE:.0f}%)"
        )
        return Result("energy", ok, detail, time.monotonic() - start, {"runs": checked})

    def nccl(self) -> list[Result]:
        """One rank on NCCL: its own log (NCCL_DEBUG=INFO, which runs on NCCL write into the run folder)
        read by `mgpu-tui nccl` and in the summary; then two NCCL ranks on the one GPU, which NCCL
        refuses as a duplicate GPU: the known limit, named as the run's root cause."""
        start, runs = time.monotonic(), self.out / "runs-nccl"
        done = self.sh(
            "nccl-run",
            self.mgpu(
                "run",
                "ddp",
                "--nproc",
                "1",
                "--device",
                "cuda",
                "--steps",
                "20",
                "--json",
                "--run-dir",
                str(runs),
            ),
            180,
        )
        summary = last_summary(done.stdout)
        logs = RunDir(summary.run_dir).nccl_logs() if summary else []
        results = []
        if summary is None or not logs:
            results.append(Result("nccl:log", False, f"no summary or no NCCL log (exit {done.returncode})"))
        else:
            read = self.sh("nccl-read", self.mgpu("nccl", *map(str, logs), "--json"), 60)
            self.sh("nccl-read-text", self.mgpu("nccl", *map(str, logs)), 60)
            try:
                reading = json.loads(read.stdout)
            except ValueError:
                reading = {}
            figures = summary.nccl
            version = reading.get("versions") or reading.get("version")
            ok = (
                read.returncode == 0
                and summary.status == "ok"
                and figures is not None
                and bool(figures.versions)
                and bool(version)
                and str(figures.versions[0]) in json.dumps(version)
            )
            detail = (
                f"{len(logs)} log(s); nccl: {str(reading.get('summary') or read.stdout.strip()[:160])}; "
                f"summary: {figures.summary if figures else None}"
            )
            results.append(Result("nccl:log", ok, detail, time.monotonic() - start, {"reading": reading}))
        start = time.monotonic()
        script = self.out / "two_nccl_ranks_one_gpu.py"
        script.write_text(TWO_RANKS_ONE_GPU)
        done = self.sh(
            "nccl-duplicate-gpu",
            self.mgpu("torchrun", "--nproc-per-node", "2", "--run-dir", str(runs), "--json", str(script)),
            180,
        )
        summary = last_summary(done.stdout)
        cause = summary.root_cause.message if summary and summary.root_cause else ""
        said = cause + done.stderr
        refused = "Duplicate GPU" in said or "invalid usage" in said.lower()
        detail = f"exit {done.returncode}; root cause: {cause[:200] or 'none'}"
        results.append(
            Result("nccl:duplicate-gpu", done.returncode == 1 and refused, detail, time.monotonic() - start)
        )
        return results

    def script(self) -> list[Result]:
        """tests/scripts/gpt_train.py, unchanged, with torch.compile and bf16 autocast: through
        `run --script` against `run --script --no-instrument`, and `mgpu-tui torchrun` against bare
        torchrun, SCRIPT_PAIRS pairs each, in turn. Speed from the script's own "time" lines (the same
        measure for both); steps, tokens/s, loss and memory shown against the script's own log;
        Dynamo's graph breaks and recompiles counted in every run."""
        path, runs = str(ROOT / "tests" / "scripts" / "gpt_train.py"), self.out / "runs-script"
        env = {"TORCH_LOGS": "graph_breaks,recompiles"}
        own = [*SCRIPT_ARGS, "--out-dir", str(self.out / "ckpt")]
        variants = {
            "run": self.mgpu(
                "run", "--script", path, "--nproc", "1", "--run-dir", str(runs), "--json", "--", *own
            ),
            "run-bare": self.mgpu(
                "run",
                "--script",
                path,
                "--nproc",
                "1",
                "--no-instrument",
                "--run-dir",
                str(runs),
                "--json",
                "--",
                *own,
            ),
            "torchrun": self.mgpu(
                "torchrun", "--nproc-per-node", "1", "--run-dir", str(runs), "--json", path, *own
            ),
            "torchrun-bare": [
                self.python,
                "-m",
                "torch.distributed.run",
                "--nproc-per-node",
                "1",
                path,
                *own,
            ],
        }
        warm = self.sh("script-warm-up", variants["torchrun-bare"], 300, env=env)  # fills the compile cache
        if warm.returncode != 0:
            return [
                Result(
                    "script",
                    False,
                    f"the script failed bare (exit {warm.returncode}); see script-warm-up.log",
                )
            ]
        seen: dict[str, list[dict]] = {v: [] for v in variants}
        for pair in range(self.pairs):
            for variant, argv in variants.items():
                done = self.sh(f"script-{variant}-{pair}", argv, 300, env=env)
                summary = last_summary(done.stdout) if variant != "torchrun-bare" else None
                seen[variant].append(script_figures(done, summary))
        (self.out / "script.json").write_text(json.dumps(seen, indent=1, default=str))
        results = []
        for ours, bare in (("run", "run-bare"), ("torchrun", "torchrun-bare")):
            ratios = [
                b["median_ms"] / o["median_ms"]
                for o, b in zip(seen[ours], seen[bare])
                if o["median_ms"] and b["median_ms"]
            ]
            shown = [o for o in seen[ours] if o.get("summary")]
            agree = [o["agree"] for o in shown]
            breaks = (sum(o["graph_breaks"] for o in seen[ours]), sum(b["graph_breaks"] for b in seen[bare]))
            recompiles = (sum(o["recompiles"] for o in seen[ours]), sum(b["recompiles"] for b in seen[bare]))
            ratio = statistics.median(ratios) if ratios else None
            ok = (
                ratio is not None
                and ratio >= 0.99
                and len(ratios) == self.pairs
                and len(agree) == self.pairs
                and all(a == [] for a in agree)
                and breaks[0] == breaks[1]
                and recompiles[0] == recompiles[1]
            )
            first = shown[0]["summary"] if shown else {}
            detail = (
                f"speed {ours}/{bare} per pair {', '.join(f'{r:.3f}' for r in ratios)} (median "
                f"{ratio if ratio is None else round(ratio, 3)}, goal >= 0.99); shown vs the script's log: "
                f"{first}; disagreements {[a for a in agree if a]}; graph breaks {breaks[0]} vs {breaks[1]}, "
                f"recompiles {recompiles[0]} vs {recompiles[1]}"
            )
            results.append(Result(f"script:{ours}", ok, detail, 0.0, {"ratios": ratios, "runs": seen[ours]}))
        return results

    def fr_hang(self) -> Result:
        """Two ranks share the GPU over gloo (CUDA tensors); rank 1 stops before a collective. The
        verdict names it within the stall timeout, and torch's fr_trace reads the flight recorder's dumps."""
        start, runs = time.monotonic(), self.out / "runs-hang"
        script = self.out / "shared_gpu_hang.py"
        script.write_text(SHARED_GPU_HANG)
        proc = subprocess.Popen(
            self.mgpu(
                "torchrun",
                "--nproc-per-node",
                "2",
                "--stall-timeout",
                "5",
                "--run-dir",
                str(runs),
                "--json",
                str(script),
            ),
            cwd=self.out,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        said, deadline = "", time.monotonic() + 120
        while time.monotonic() < deadline and "the run goes on" not in said:
            line = proc.stderr.readline()
            if not line:
                break
            said += line
        time.sleep(2)  # the dumps are written
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=90)
        (self.out / "fr-hang.log").write_text(
            f"(exit {proc.returncode})\n--- stdout\n{out}\n--- stderr\n{said}{err}"
        )
        summary = last_summary(out)
        stall = summary.stall if summary else None
        if summary is None or stall is None:
            return Result("fr-hang", False, f"no stall verdict (exit {proc.returncode}); see fr-hang.log")
        self.fr_gloo_run_dir = summary.run_dir
        readable = RunDir(summary.run_dir).torch_dumps_dir(readable=True)
        read = self.sh(
            "fr-trace",
            [self.python, "-m", "torch.distributed.flight_recorder.fr_trace", str(readable)],
            120,
        )
        report = read.stdout + read.stderr
        traced = read.returncode == 0 and "Traceback" not in report and "missing ranks: {1}" in report
        # What fr_trace reads depends on torch's version (fr-versions records it): torch 2.11's refuses
        # gloo dumps ("gloo != 'nccl' or 'xccl'"), so the verdict alone decides here.
        ok = proc.returncode == 130 and stall.culprit == 1
        detail = (
            f"verdict: {stall.verdict[:220]}; fr_trace: exit {read.returncode}, "
            f"missing ranks {{1}} named: {traced}"
        )
        return Result("fr-hang", ok, detail, time.monotonic() - start)

    def topology(self) -> Result:
        start = time.monotonic()
        text = subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True).stdout
        saved = self.out / "nvidia-smi-topo.txt"
        saved.write_text(text)
        ours = self.sh("topo-nvml", self.mgpu("topo", "--json"))
        theirs = self.sh("topo-text", self.mgpu("topo", "--from-file", str(saved), "--json"))
        self.sh("topo-table", self.mgpu("topo"))
        try:
            a, b = json.loads(ours.stdout), json.loads(theirs.stdout)
        except ValueError:
            return Result("topology", False, "mgpu-tui topo printed no JSON; see topo-*.log")
        same = a["matrix"] == b["matrix"] and [g["cpu_affinity"] for g in a["gpus"]] == [
            g["cpu_affinity"] for g in b["gpus"]
        ]
        detail = (
            f"{len(a['gpus'])} GPU(s): NVML {a['matrix']} vs nvidia-smi {b['matrix']}; "
            f"affinity {[g['cpu_affinity'] for g in a['gpus']]}; reading: {a['reading']}"
        )
        return Result("topology", same, detail, time.monotonic() - start)

    def telemetry(self) -> Result:
        """Sample NVML (through the app's sampler) and nvidia-smi together, under a matmul load."""
        from mgpu_tui.engine.machine.telemetry import Sampler

        start = time.monotonic()
        load = subprocess.Popen(
            [
                self.python,
                "-c",
                (
                    "import time, torch\n"
                    "keep = torch.empty(6 << 30, dtype=torch.uint8, device='cuda')\n"
                    "a = torch.randn(8192, 8192, device='cuda', dtype=torch.bfloat16)\n"
                    "end = time.time() + 25\n"
                    "while time.time() < end:\n"
                    "    for _ in range(20): a @ a\n"
                    "    torch.cuda.synchronize()\n"
                ),
            ]
        )
        sampler = Sampler(interval=1.0)
        rows = []
        try:
            time.sleep(8)  # the load is up and the power reading has settled
            for _ in range(10):
                smi = subprocess.run(
                    [
                        "nvidia-smi",
                        "--query-gpu=index,memory.used,utilization.gpu,temperature.gpu,power.draw",
                        "--format=csv,noheader,nounits",
                    ],
                    capture_output=True,
                    text=True,
                ).stdout
                snap = sampler.sample()
                for line in smi.strip().splitlines():
                    index, mem, util, temp, power = [v.strip() for v in line.split(",")]
                    r = snap.gpus[int(index)].readings
                    rows.append(
                        {
                            "gpu": int(index),
                            "smi_memory_mib": float(mem),
                            "nvml_memory_mib": r.memory_used / 2**20,
                            "smi_util": float(util),
                            "nvml_util": r.util_gpu,
                            "smi_temp": float(temp),
                            "nvml_temp": r.temperature_c,
                            "smi_power": float(power),
                            "nvml_power": r.power_w,
                        }
                    )
                time.sleep(0.5)
        finally:
            load.kill()
            load.wait()
        (self.out / "telemetry.json").write_text(json.dumps(rows, indent=1))

        def median_diff(a: str, b: str, relative: bool = False) -> float:
            return statistics.median(abs(r[a] - r[b]) / (r[a] if relative else 1) for r in rows)

        diffs = {
            "memory_used_mib": median_diff("smi_memory_mib", "nvml_memory_mib"),
            "util_pct": median_diff("smi_util", "nvml_util"),
            "temperature_c": median_diff("smi_temp", "nvml_temp"),
            "power_w_rel": median_diff("smi_power", "nvml_power", relative=True),
        }
        ok = all(diffs[k] <= TOLERANCE[k] for k in TOLERANCE) and len(rows) >= 10
        detail = (
            "median |NVML - nvidia-smi| over 10 samples under load: "
            + ", ".join(f"{k} {v:.3g} (<= {TOLERANCE[k]})" for k, v in diffs.items())
            + f"; load util {rows[-1]['nvml_util']}%, {rows[-1]['nvml_power']:.0f} W"
        )
        return Result("telemetry", ok, detail, time.monotonic() - start, {"median_diffs": diffs})

    def sampler_cost(self) -> Result:
        from mgpu_tui.engine.machine import nvml
        from mgpu_tui.engine.machine.telemetry import Sampler

        start = time.monotonic()
        nvml.status()  # initialise NVML in this process

        def cost(fn, n: int = 10) -> tuple[float, float]:
            walls, cpus = [], []
            for _ in range(n):
                w, c = time.perf_counter(), time.thread_time()
                fn()
                walls.append(time.perf_counter() - w)
                cpus.append(time.thread_time() - c)
            return statistics.median(walls) * 1e3, statistics.median(cpus) * 1e3

        base = cost(lambda: nvml.readings(0, pcie=False))
        full = cost(lambda: nvml.readings(0, pcie=True))
        sampler = Sampler()
        sample = cost(sampler.sample, 20)
        # An 8-GPU box: eight GPUs' readings without PCIe, plus one GPU's PCIe in turn.
        eight = 8 * base[0] + (full[0] - base[0])
        metrics = {
            "readings_ms": base,
            "readings_with_pcie_ms": full,
            "sample_ms": sample,
            "eight_gpus_sample_ms_estimate": eight,
        }
        detail = (
            f"one GPU's readings {base[0]:.2f} ms wall / {base[1]:.2f} ms CPU; with PCIe "
            f"{full[0]:.1f} ms wall / {full[1]:.2f} ms CPU; a whole sample {sample[0]:.1f} ms wall / "
            f"{sample[1]:.2f} ms CPU; an 8-GPU sample would take about {eight:.0f} ms"
        )
        ok = sample[0] < 100 and eight < 100
        return Result("sampler-cost", ok, detail, time.monotonic() - start, metrics)

    def app(self) -> Result:
        """The app in a real terminal (tmux, 160x50) for 30 s with a 2-rank ddp run on the GPU."""
        if shutil.which("tmux") is None:
            return Result("app", False, "tmux is not installed: cannot drive the app in a terminal")
        start = time.monotonic()
        session = f"mgpu-gpu-check-{os.getpid()}"
        share = ["--share-gpus"] if self.gpus < 2 else []
        command = " ".join(
            [
                *self.mgpu(
                    "run",
                    "ddp",
                    "--nproc",
                    "2",
                    "--device",
                    "cuda",
                    "--steps",
                    "1000000",
                    "--run-dir",
                    str(self.out / "runs"),
                    *share,
                    "--tui",
                )
            ]
        )
        subprocess.run(
            [
                "tmux",
                "new-session",
                "-d",
                "-s",
                session,
                "-x",
                "160",
                "-y",
                "50",
                f"cd {self.out} && {command}; echo APP-EXIT $?; sleep 600",
            ],
            check=True,
        )

        def screen() -> str:
            return subprocess.run(
                ["tmux", "capture-pane", "-p", "-t", session], capture_output=True, text=True
            ).stdout

        try:
            time.sleep(30)
            run_view = screen()
            subprocess.run(["tmux", "send-keys", "-t", session, "d"])
            time.sleep(2.5)
            dashboard = screen()
            subprocess.run(["tmux", "send-keys", "-t", session, "q"])
            time.sleep(1)
            subprocess.run(["tmux", "send-keys", "-t", session, "y"])
            deadline = time.monotonic() + 30
            while "APP-EXIT" not in screen() and time.monotonic() < deadline:
                time.sleep(0.5)
            ending = screen()
        finally:
            subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
        (self.out / "app-run-view.txt").write_text(run_view)
        (self.out / "app-dashboard.txt").write_text(dashboard)
        rows = [line for line in run_view.splitlines() if line.strip().startswith(("rank 0", "rank 1"))]
        exited = "APP-EXIT 0" in ending
        left = subprocess.run(
            ["pgrep", "-f", "mgpu_tui.demos.ddp"], capture_output=True, text=True
        ).stdout.split()
        ok = len(rows) >= 2 and "running" in run_view and "GPU0" in dashboard and exited and not left
        shown = "; ".join(" ".join(r.split()) for r in rows)[:120]
        detail = (
            f"after 30 s: {len(rows)} rank rows ({shown}); dashboard shows GPU0: "
            f"{'GPU0' in dashboard}; q, y exit 0: {exited}; ranks left: {len(left)}"
        )
        self.screenshot(self.out / "gpu-run-view.svg")
        return Result("app", ok, detail, time.monotonic() - start)

    def screenshot(self, target: Path) -> None:
        """An SVG of the Run view during a real 2-rank ddp run on the GPU (Textual's Pilot)."""
        share = ["--share-gpus"] if self.gpus < 2 else []
        script = str(ROOT / "scripts" / "screenshot-run-view.py")
        done = self.sh(
            "screenshot",
            [self.python, script, "--device", "cuda", *share, "--steps", "1500", "--out", str(target)],
            300,
        )
        print(f"gpu-check: screenshot {'saved as ' + str(target) if done.returncode == 0 else 'FAILED'}")


class PowerLog:
    """nvidia-smi's power.draw of GPU 0, about 4 times a second, on a thread: [[time, watts], ...]."""

    def __init__(self) -> None:
        self.samples: list[list[float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            done = subprocess.run(
                ["nvidia-smi", "--id=0", "--query-gpu=power.draw", "--format=csv,noheader,nounits"],
                capture_output=True,
                text=True,
            )
            try:
                self.samples.append([time.time(), float(done.stdout.strip())])
            except ValueError:
                pass
            self._stop.wait(0.25)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def script_figures(done: subprocess.CompletedProcess, summary) -> dict:
    """What the GPT script's own log says (its "iter" lines: median time after the first 5, which
    hold the compilation; last loss; allocator peak), and where a summary is given, what mgpu-tui
    showed beside it, with the disagreements named."""
    text = done.stdout
    if summary is not None:
        logs = sorted(Path(summary.run_dir).glob("logs/*/attempt_*/0/stdout.log"))
        text = logs[-1].read_text() if logs else ""
    iters = [m.groups() for m in ITER_LINE.finditer(text)]
    times = [float(t) for _, _, t, _ in iters[5:]]
    figures: dict = {
        "exit": done.returncode,
        "iters": len(iters),
        "median_ms": statistics.median(times) if times else None,
        "last_loss": float(iters[-1][1]) if iters else None,
        "mem_mib": float(iters[-1][3]) if iters and iters[-1][3] else None,
        "graph_breaks": len(re.findall(r"Graph break", done.stderr + text)),
        "recompiles": len(re.findall(r"Recompiling function", done.stderr + text)),
    }
    if summary is None or not summary.steps:
        return figures

    def flag(name: str) -> int:
        return int(SCRIPT_ARGS[SCRIPT_ARGS.index(name) + 1])

    tokens = flag("--batch-size") * flag("--block-size") * flag("--grad-accum")
    shown = {
        "status": summary.status,
        "steps": summary.steps,
        "step_ms": 1000 * summary.step_time_s_median if summary.step_time_s_median else None,
        "tokens_per_s": summary.tokens_per_s,
        "loss": summary.final_loss,
        "peak_mib": summary.peak_mem_bytes[0] / 2**20 if summary.peak_mem_bytes[0] else None,
    }
    own = {
        "steps": len(iters),
        "step_ms": figures["median_ms"],
        # mgpu-tui's rate: the steady steps' tokens over their summed seconds, the evaluation's included.
        "tokens_per_s": tokens * len(times) / sum(times) * 1000 if times else None,
        "loss": figures["last_loss"],
        "peak_mib": figures["mem_mib"],
    }
    # Tolerances: the step's time and tokens/s are timed by the two at different points of the step;
    # mgpu-tui's loss is the step's, over its micro-batches, the script prints its last micro-batch's.
    close = {"steps": 0, "step_ms": 0.05, "tokens_per_s": 0.05, "loss": 0.05, "peak_mib": 0.01}
    agree = [
        key
        for key, tolerance in close.items()
        if shown[key] is None or own[key] is None or abs(shown[key] - own[key]) > tolerance * abs(own[key])
    ]
    return {**figures, "summary": shown, "own": own, "agree": agree}


TWO_RANKS_ONE_GPU = """
import torch, torch.distributed as dist
dist.init_process_group("nccl", device_id=torch.device("cuda", 0))
x = torch.ones(4, device="cuda:0")
dist.all_reduce(x)
torch.cuda.synchronize()
dist.destroy_process_group()
"""

SHARED_GPU_HANG = """
import os, time, torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
dist.init_process_group("gloo")
rank = dist.get_rank()
model = DDP(torch.nn.Linear(256, 256).cuda(0))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(10_000):
    if rank == 1 and step == 8:
        while True:  # a data loader that never delivers
            time.sleep(3600)
    loss = model(torch.randn(64, 256, device="cuda:0")).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
    time.sleep(0.02)
"""


def last_summary(output: str):
    """The RunSummary of a ``run --json``'s output (its last line), or None."""
    from mgpu_tui.engine.run.summary import RunSummary  # the package: only once there is a GPU

    try:
        return RunSummary.from_json(json.loads(output.strip().splitlines()[-1]))
    except (IndexError, ValueError, KeyError, TypeError):
        return None


def no_gpu_reason() -> str | None:
    """Why there is no GPU to validate here, or None. Standard library only."""
    if shutil.which("nvidia-smi") is None:
        return "there is no NVIDIA GPU here (no nvidia-smi, so no NVIDIA driver)"
    listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
    if listed.returncode != 0 or "GPU" not in listed.stdout:
        said = (listed.stderr or listed.stdout).strip()[:120]
        return f"there is no NVIDIA GPU here (nvidia-smi -L: {said})"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="where outputs go (default runs/gpu-check-<time>)")
    parser.add_argument("--only", help=f"a comma-separated subset of: {', '.join(CHECKS)}")
    parser.add_argument("--jobs", type=int, default=8, help="mode runs at a time (default 8)")
    parser.add_argument(
        "--pairs", type=int, default=SCRIPT_PAIRS, help=f"the script check's pairs (default {SCRIPT_PAIRS})"
    )
    parser.add_argument(
        "--budget", type=float, help="seconds: a check that would start after them is skipped, saying so"
    )
    parser.add_argument(
        "--gpu-or-exit",
        action="store_true",
        help="only say whether there is a GPU: exit 3 with one sentence when not",
    )
    args = parser.parse_args(argv)
    reason = no_gpu_reason()
    if reason:
        print(f"gpu-check: {reason}, so there is nothing to validate (exit 3).", file=sys.stderr)
        return 3
    if args.gpu_or_exit:
        return 0
    only = set(args.only.split(",")) if args.only else set(CHECKS)
    if only - set(CHECKS):
        print(f"gpu-check: unknown check(s) {', '.join(sorted(only - set(CHECKS)))}.", file=sys.stderr)
        return 2
    out = args.out or ROOT / "runs" / time.strftime("gpu-check-%Y%m%dT%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    checker = Checker(out.resolve(), args.jobs, sys.executable)
    checker.pairs = args.pairs
    info = checker.machine()
    print("gpu-check: " + "; ".join(info["gpus"]))
    print(
        f"gpu-check: Python {info.get('python')}, torch {info.get('torch')}, CUDA {info.get('cuda')}, "
        f"NCCL {info.get('nccl')}; outputs in {out}"
    )
    if not info.get("cuda_available"):
        print(
            f"gpu-check: torch cannot use the GPU ({info.get('torch_error') or 'a CPU build of torch?'}), "
            "so there is nothing to validate (exit 3).",
            file=sys.stderr,
        )
        return 3
    checker.gpus = info["devices"]
    started = time.monotonic()
    try:
        steps = [
            ("check-level3", checker.check_level3),
            ("check-shared", checker.check_shared),
            ("modes", checker.mode_runs),
            ("oom", checker.oom),
            ("compare", checker.compare),
            ("transformer", checker.transformer),
            ("nccl", checker.nccl),
            ("script", checker.script),
            ("fr-hang", checker.fr_hang),
            ("topology", checker.topology),
            ("sampler-cost", checker.sampler_cost),
            ("telemetry", checker.telemetry),
            ("app", checker.app),
            ("launchers", checker.launchers),
            ("script-mfu", checker.script_mfu),
            ("input-bound", checker.input_bound),
            ("fr-versions", lambda: checker.fr_versions(checker.fr_gloo_run_dir)),
            ("speed", checker.speed),
            ("gpt13b-profile", checker.gpt13b_profile),
        ]
        order = [n for n in args.only.split(",") if n in dict(steps)] if args.only else [n for n, _ in steps]
        for name in order:
            step = dict(steps)[name]
            if args.budget is not None and time.monotonic() - started > args.budget:
                checker.add(Result(name, None, f"skipped: the budget of {args.budget:.0f} s was spent"))
                continue
            try:
                outcome = step()
            except Exception as exc:  # noqa: BLE001 (a broken check is a failed check, named)
                outcome = Result(name, False, f"the check itself broke: {type(exc).__name__}: {exc}")
            for result in outcome if isinstance(outcome, list) else [outcome]:
                checker.add(result)
            checker.write_report(info, started)  # after each check: a cut-off run keeps what it found
    except KeyboardInterrupt:
        print("gpu-check: interrupted", file=sys.stderr)
        return 130
    failed = [r.name for r in checker.results if r.ok is False]
    passed = sum(r.ok is True for r in checker.results)
    skipped = sum(r.ok is None for r in checker.results)
    checker.write_report(info, started)
    print(
        f"gpu-check: {passed} passed, {len(failed)} failed, {skipped} skipped in "
        f"{time.monotonic() - started:.0f} s" + (f"; failed: {', '.join(failed)}" if failed else "")
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
