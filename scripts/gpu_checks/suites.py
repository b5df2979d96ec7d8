"""check-level3, check-shared, modes and oom: mgpu-tui's own checks, every mode in every precision with
--verify, and the out-of-memory fault on the GPU."""

from __future__ import annotations

import concurrent.futures
import json
import time
from pathlib import Path

from gpu_checks.base import CheckerBase, Result, last_summary
from mgpu_tui.engine.planning.modes import MODES as CATALOGUE

MODES = tuple(CATALOGUE)  # every mode of the catalogue


PRECISIONS = {
    "float32": [],
    "fp16": ["--amp", "--amp-dtype", "fp16"],
    "bf16": ["--amp", "--amp-dtype", "bf16"],
}


STEPS = 30  # enough for the runs to drift apart if a mode trained another function


class SuiteChecks(CheckerBase):
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
            before = [
                nvml.readings(i, pcie=False).memory_used or 0 for i in range(self.gpus)
            ]  # NVML's, on a GPU
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
            after = [nvml.readings(i, pcie=False).memory_used or 0 for i in range(self.gpus)]
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
