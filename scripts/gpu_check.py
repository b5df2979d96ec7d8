"""Validate every CUDA path of mgpu-tui on this machine's GPUs: `make gpu-check`.

    make gpu-check                                   # or: .venv/bin/python scripts/gpu_check.py
    .venv/bin/python scripts/gpu_check.py --only modes,oom --out /tmp/gpu-check

Prints the machine (GPU, driver, CUDA, torch, NCCL), then one PASS/FAIL line per check:

    check-level3   mgpu-tui --check --level 3 --require-gpus 1
    check-shared   mgpu-tui --check --nproc 2 --share-gpus (a one-GPU box: every multi-rank path)
    modes          every mode with --device cuda --verify, in float32, fp16 (GradScaler) and bf16;
                   two ranks for the multi-process modes, sharing GPUs where the box has too few
    oom            the out-of-memory fault: named, no rank left, the GPU's memory free again (NVML)
    compare        `mgpu-tui compare` on the GPU: every row ok, TFLOP/s and MFU from the GPU's peak
    topology       `mgpu-tui topo` against `nvidia-smi topo -m` on this box: the same matrix
    telemetry      the sampler against `nvidia-smi --query-gpu` at the same moments, under load
    sampler-cost   what one telemetry sample costs with the real driver, and NVML's slow calls
    app            the app in tmux for 30 s with a run on the GPU; the screen is checked and kept,
                   and an SVG of the Run view is saved (Textual's screenshot, gpu-run-view.svg)

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
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from mgpu_tui.engine.planning.modes import MODES as CATALOGUE

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
    "topology",
    "telemetry",
    "sampler-cost",
    "app",
)
# Telemetry against nvidia-smi, read a fraction of a second apart: how far each field may differ.
TOLERANCE = {"memory_used_mib": 256, "util_pct": 15, "temperature_c": 3, "power_w_rel": 0.15}


@dataclass
class Result:
    name: str
    ok: bool | None  # None: skipped
    detail: str
    seconds: float = 0.0
    metrics: dict = field(default_factory=dict)


class Checker:
    def __init__(self, out: Path, jobs: int, python: str) -> None:
        self.out, self.jobs, self.python = out, jobs, python
        self.results: list[Result] = []
        self.gpus = 0

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
        if mode == "rpc" and precision == "fp16":
            return Result(
                name,
                None,
                "rpc trains mixed precision in bf16 only (fp16's GradScaler does not "
                "work with distributed autograd)",
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
        per_rank = {"ddp_mp": 2}.get(mode, 1)
        needed = (2 * per_rank) if multi else (2 if mode == "mp" else 1)
        if needed > self.gpus:
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
            rank = "1" if mode == "ddp" else "0"
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

    def transformer(self) -> Result:
        """gpt-125m in fp16: the plan (NVML's memory), then single, ddp and fsdp on one rank each:
        MFU against the dense fp16 peak, and the allocator's peak against the predicted total."""
        start = time.monotonic()
        model = ["--model", "gpt-125m", "--batch-size", "8", "--amp"]
        planned = self.sh("transformer-plan", self.mgpu("plan", *model, "--json"), 120)
        try:
            plan = {m["mode"]: m for m in json.loads(planned.stdout)["modes"]}
        except (ValueError, KeyError):
            return Result(
                "transformer", False, f"no plan (exit {planned.returncode}); see transformer-plan.log"
            )
        argv = ["single", "ddp", "fsdp", "--device", "cuda", "--nproc", "1", "--steps", "30", *model]
        rows, ok, code = self.run_compare("transformer", argv, 600)
        if rows is None:
            return Result("transformer", False, f"no report (exit {code}); see transformer.log")
        measured = []
        for r in rows:
            rank0 = r["memory"][0] if r["memory"] else {}
            state = (rank0.get("predicted_state_bytes"), rank0.get("measured_state_bytes"))
            measured.append(
                {
                    "mode": r["mode"],
                    "mfu": r["mfu"],
                    "tokens_per_s": r["tokens_per_s"],
                    "predicted_total_bytes": rank0.get("predicted_total_bytes"),
                    "peak_bytes": rank0.get("peak_bytes"),
                    "fits": plan.get(r["mode"], {}).get("fits"),
                    "predicted_state_bytes": state[0],
                    "measured_state_bytes": state[1],
                }
            )
        gib = 2**30
        detail = "; ".join(
            f"{m['mode']} MFU {100 * (m['mfu'] or 0):.1f}%, peak "
            f"{(m['peak_bytes'] or 0) / gib:.2f} GiB vs predicted "
            f"{(m['predicted_total_bytes'] or 0) / gib:.2f} GiB"
            for m in measured
        )
        return Result("transformer", ok, detail, time.monotonic() - start, {"rows": measured, "plan": plan})

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
            ("topology", checker.topology),
            ("sampler-cost", checker.sampler_cost),
            ("telemetry", checker.telemetry),
            ("app", checker.app),
        ]
        for name, step in steps:
            if name not in only:
                continue
            try:
                outcome = step()
            except Exception as exc:  # noqa: BLE001 (a broken check is a failed check, named)
                outcome = Result(name, False, f"the check itself broke: {type(exc).__name__}: {exc}")
            for result in outcome if isinstance(outcome, list) else [outcome]:
                checker.add(result)
    except KeyboardInterrupt:
        print("gpu-check: interrupted", file=sys.stderr)
        return 130
    failed = [r.name for r in checker.results if r.ok is False]
    passed = sum(r.ok is True for r in checker.results)
    skipped = sum(r.ok is None for r in checker.results)
    report = {
        "machine": info,
        "seconds": time.monotonic() - started,
        "passed": not failed,
        "results": [asdict(r) for r in checker.results],
    }
    (out / "report.json").write_text(json.dumps(report, indent=1))
    print(
        f"gpu-check: {passed} passed, {len(failed)} failed, {skipped} skipped in "
        f"{time.monotonic() - started:.0f} s" + (f"; failed: {', '.join(failed)}" if failed else "")
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
