"""nccl: a one-rank NCCL job's own log read by mgpu-tui nccl and by the summary; two NCCL ranks on one
GPU refused (a known limit, recorded)."""

from __future__ import annotations

import json
import time

from gpu_checks.base import CheckerBase, Result, last_summary
from mgpu_tui.engine.protocol.rundir import RunDir

TWO_RANKS_ONE_GPU = """
import torch, torch.distributed as dist
dist.init_process_group("nccl", device_id=torch.device("cuda", 0))
x = torch.ones(4, device="cuda:0")
dist.all_reduce(x)
torch.cuda.synchronize()
dist.destroy_process_group()
"""


class NcclChecks(CheckerBase):
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
