"""The third GPU round's checks (issue 46), used by scripts/gpu_check.py:

    launchers      Lightning strategy="ddp" on the GPU under `mgpu-tui exec` and the torchrun
                   drop-in; a one-process Hugging Face Trainer (samples/s and tokens/s against its
                   own train_samples_per_second); accelerate with one process
    script-mfu     tests/scripts/gpt_train.py compiled, bf16, under the drop-in: the MFU from torch's
                   FLOP count against the script's own nanoGPT estimate (within 5%), the steps
                   still compiled (graph breaks and recompiles as bare)
    input-bound    tests/scripts/anatomy_train.py on CUDA with a slow dataset: the verdict, the data
                   share against the planted one, and the GPU's idle time (NVML)
    fr-versions    what this torch's fr_trace reads: a gloo dump (two ranks sharing the GPU, one
                   stuck) and an NCCL dump (one rank)
    speed          the drop-in against bare torchrun over --pairs pairs, the script's own medians
    gpt13b-profile gpt-1.3b single in bf16 (compare's MFU), the SM clock and power meanwhile, and a
                   torch.profiler table of its step (where the time goes)

Each check returns Results; the commands' outputs go to the checker's folder.
"""

from __future__ import annotations

import json
import re
import statistics
import subprocess
import time

from gpu_checks.base import ROOT, Result, json_summary, script_log
from gpu_checks.compare_runs import CompareChecks
from mgpu_tui.engine.protocol.rundir import RunDir

GPT = ROOT / "tests" / "scripts" / "gpt_train.py"
H200_BF16 = 989.5e12  # engine/machine/peaks.py, the H200 SXM's dense bf16 (datasheet 1,979 with sparsity)
MFU_ARGS = [
    "--compile",
    "--n-layer",
    "12",
    "--n-embd",
    "768",
    "--n-head",
    "12",
    "--block-size",
    "1024",
    "--batch-size",
    "8",
    "--grad-accum",
    "2",
    "--max-iters",
    "60",
    "--eval-interval",
    "1000",
]
ITER = re.compile(r"iter (\d+): loss [\d.]+, time ([\d.]+)ms.*?, mfu ([\d.]+)%")


class Round3Checks(CompareChecks):  # gpt13b-profile runs compare's run
    gpt_args = MFU_ARGS
    anatomy_args = [
        "--device",
        "cuda",
        "--steps",
        "40",
        "--batch",
        "16",
        "--features",
        "1024",
        "--width",
        "4096",
        "--compute",
        "8",
        "--slow-data-rank",
        "0",
        "--sleep",
        "0.004",
    ]

    def peak_flops(self) -> float:
        return H200_BF16

    # ---- launchers -------------------------------------------------------------------

    # ---- the GPT script: MFU against its own estimate, then speed in pairs --------------

    def _gpt_runs(
        self, name: str, instrumented: bool
    ) -> tuple[subprocess.CompletedProcess, dict | None, str]:
        own = [*self.gpt_args, "--peak-flops", str(self.peak_flops()), "--out-dir", str(self.out / "ckpt")]
        env = {"TORCH_LOGS": "graph_breaks,recompiles"}
        if instrumented:
            argv = self.mgpu(
                "torchrun",
                "--nproc-per-node",
                "1",
                "--json",
                "--run-dir",
                str(self.out / "runs-gpt"),
                str(GPT),
                *own,
            )
        else:
            argv = [self.python, "-m", "torch.distributed.run", "--nproc-per-node", "1", str(GPT), *own]
        done = self.sh(name, argv, 300, env=env)
        summary = json_summary(done.stdout) if instrumented else None
        return done, summary, script_log(summary) if instrumented else done.stdout

    def script_mfu(self) -> list:
        start = time.monotonic()
        warm, _, _ = self._gpt_runs("gpt-warm-up", instrumented=False)  # fills inductor's cache
        if warm.returncode != 0:
            return [
                Result(
                    "script-mfu",
                    False,
                    f"the script failed bare (exit {warm.returncode}); see gpt-warm-up.log",
                )
            ]
        done, summary, log = self._gpt_runs("gpt-mfu", instrumented=True)
        self.mfu_seen = [self._mfu_figures(done, summary, log)]
        figures = self.mfu_seen[0]
        ok = figures.get("ratio") is not None and abs(figures["ratio"] - 1) <= 0.05
        breaks = (figures["graph_breaks"], len(re.findall(r"Graph break", warm.stderr + warm.stdout)))
        recompiles = (
            figures["recompiles"],
            len(re.findall(r"Recompiling function", warm.stderr + warm.stdout)),
        )
        ok = ok and breaks[0] == breaks[1] and recompiles[0] == recompiles[1]
        detail = (
            f"mgpu-tui MFU {figures.get('mfu')} ({figures.get('tflops')} TFLOP/s, {figures.get('basis')}) "
            f"against the script's own estimate {figures.get('own_mfu')} (ratio {figures.get('ratio')}, "
            "goal within 5%); "
            f"graph breaks {breaks[0]} vs {breaks[1]} bare, recompiles {recompiles[0]} vs {recompiles[1]}; "
            f"note {figures.get('note')}"
        )
        return [Result("script-mfu", ok, detail, time.monotonic() - start, figures)]

    def _mfu_figures(self, done: subprocess.CompletedProcess, summary: dict | None, log: str) -> dict:
        iters = [(int(i), float(ms), float(m) / 100) for i, ms, m in ITER.findall(log)]
        steady = iters[5:]
        own = (
            len(steady) / sum(1 / m for _, _, m in steady)
            if steady and all(m > 0 for *_, m in steady)
            else None
        )
        compute = (summary or {}).get("compute") or {}
        mfu = compute.get("mfu")
        return {
            "exit": done.returncode,
            "iters": len(iters),
            "own_mfu": own,  # over the same seconds: the iterations' harmonic mean
            "own_median_ms": statistics.median(ms for _, ms, _ in steady) if steady else None,
            "mfu": mfu,
            "tflops": compute.get("tflops"),
            "basis": compute.get("basis"),
            "note": compute.get("note"),
            "ratio": mfu / own if mfu and own else None,
            "step_ms": 1000 * summary["step_time_s_median"]
            if summary and summary.get("step_time_s_median")
            else None,
            "graph_breaks": len(re.findall(r"Graph break", done.stderr + log)),
            "recompiles": len(re.findall(r"Recompiling function", done.stderr + log)),
        }

    def speed(self) -> list:
        start = time.monotonic()
        ratios, mfus = [], []
        for pair in range(self.pairs):
            done, summary, log = self._gpt_runs(f"gpt-dropin-{pair}", instrumented=True)
            figures = self._mfu_figures(done, summary, log)
            bare, _, bare_log = self._gpt_runs(f"gpt-bare-{pair}", instrumented=False)
            bare_ms = [float(ms) for _, ms, _ in ITER.findall(bare_log)][5:]
            if figures["own_median_ms"] and bare_ms:
                ratios.append(statistics.median(bare_ms) / figures["own_median_ms"])
            mfus.append(figures.get("ratio"))
        ratio = statistics.median(ratios) if ratios else None
        ok = ratio is not None and ratio >= 0.99 and len(ratios) == self.pairs
        detail = (
            f"the script's own median step, bare / drop-in, per pair {', '.join(f'{r:.3f}' for r in ratios)} "
            f"(median {ratio if ratio is None else round(ratio, 3)}, goal >= 0.99); MFU ratio to its own "
            f"estimate per pair {mfus}"
        )
        return [Result("speed", ok, detail, time.monotonic() - start, {"ratios": ratios, "mfu_ratios": mfus})]

    # ---- where a step goes, on CUDA ---------------------------------------------------

    def input_bound(self) -> list:
        start = time.monotonic()
        script = str(ROOT / "tests" / "scripts" / "anatomy_train.py")
        args = self.anatomy_args
        done = self.sh(
            "input-bound",
            self.mgpu(
                "torchrun",
                "--nproc-per-node",
                "1",
                "--json",
                "--run-dir",
                str(self.out / "runs-ib"),
                script,
                *args,
            ),
            240,
        )
        summary = json_summary(done.stdout)
        if summary is None:
            return [Result("input-bound", False, f"exit {done.returncode}; see input-bound.log")]
        anatomy = (summary.get("anatomy") or [{}])[0]
        step_s = anatomy.get("step_s") or 0
        share = anatomy.get("data_s", 0) / step_s if step_s else None
        planted = int(args[args.index("--batch") + 1]) * float(args[args.index("--sleep") + 1])
        verdicts = [v["kind"] for v in summary.get("verdicts", [])]
        telemetry = summary.get("telemetry") or {}
        ok = done.returncode == 0 and "input-bound" in verdicts and share is not None and share >= 0.8
        detail = (
            f"verdicts {verdicts}; data {share if share is None else round(share, 3)} of a "
            f"{step_s * 1000:.1f} ms step (planted {planted * 1000:.0f} ms of data a step); "
            f"GPU telemetry {json.dumps(telemetry)[:400]}"
        )
        return [Result("input-bound", ok, detail, time.monotonic() - start, {"summary": summary})]

    # ---- the flight recorder by torch version --------------------------------------------

    def fr_versions(self, gloo_run_dir: str | None) -> list:
        start = time.monotonic()
        results = []
        torch_version = self.sh(
            "torch-version", [self.python, "-c", "import torch; print(torch.__version__)"], 60
        ).stdout.strip()
        if gloo_run_dir:
            read = self.sh(
                "fr-trace-gloo",
                [
                    self.python,
                    "-m",
                    "torch.distributed.flight_recorder.fr_trace",
                    str(RunDir(gloo_run_dir).torch_dumps_dir(readable=True)),
                ],
                120,
            )
            text = read.stdout + read.stderr
            refused = "gloo" in text and ("nccl" in text or "xccl" in text) and read.returncode != 0
            results.append(
                Result(
                    "fr-trace:gloo",
                    True
                    if read.returncode == 0 and "missing ranks: {1}" in text
                    else (None if refused else False),
                    f"torch {torch_version}: exit {read.returncode}; "
                    + (
                        "refuses gloo dumps: " + text.strip().splitlines()[-1][:200]
                        if refused
                        else text.strip()[-300:]
                    ),
                    time.monotonic() - start,
                )
            )
        script, folder = self.out / "nccl_one_rank.py", self.out / "fr-nccl"
        script.write_text(NCCL_ONE_RANK)
        done = self.sh(
            "fr-nccl-run",
            [self.python, "-m", "torch.distributed.run", "--nproc-per-node", "1", str(script), str(folder)],
            180,
        )
        dumps = sorted(p.name for p in folder.glob("*")) if folder.is_dir() else []
        if done.returncode != 0 or not dumps:
            results.append(
                Result("fr-trace:nccl", False, f"exit {done.returncode}, dumps {dumps}; see fr-nccl-run.log")
            )
            return results
        read = self.sh(
            "fr-trace-nccl",
            [self.python, "-m", "torch.distributed.flight_recorder.fr_trace", str(folder)],
            120,
        )
        text = read.stdout + read.stderr
        results.append(
            Result(
                "fr-trace:nccl",
                read.returncode == 0 and "Traceback" not in text,
                f"torch {torch_version}: dumps {dumps}; fr_trace exit {read.returncode}: "
                f"{text.strip()[-300:]}",
                time.monotonic() - start,
            )
        )
        return results

    # ---- gpt-1.3b: MFU, clocks, and a profile ----------------------------------------------

    def gpt13b_profile(self) -> list:
        start = time.monotonic()
        smi = subprocess.Popen(
            [
                "nvidia-smi",
                "--query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active",
                "--format=csv,noheader",
                "-lms",
                "500",
            ],
            stdout=open(self.out / "gpt13b-clocks.csv", "w"),
            stderr=subprocess.DEVNULL,
        )
        try:
            rows, ok, code = self.run_compare(
                "gpt13b-compare",
                [
                    "single",
                    "--device",
                    "cuda",
                    "--nproc",
                    "1",
                    "--steps",
                    "20",
                    "--model",
                    "gpt-1.3b",
                    "--batch-size",
                    "8",
                    "--amp",
                    "--amp-dtype",
                    "bf16",
                ],
                300,
            )
            profile = self.sh(
                "gpt13b-profile",
                [
                    self.python,
                    str(ROOT / "scripts" / "gpu_profile_gpt.py"),
                    "--out",
                    str(self.out / "gpt13b-profile.txt"),
                ],
                240,
            )
        finally:
            smi.terminate()
        clocks = [
            line.split(", ")
            for line in (self.out / "gpt13b-clocks.csv").read_text().splitlines()
            if line.count(",") >= 5
        ]
        sm = [float(c[1].split()[0]) for c in clocks if c[1].split()[0].replace(".", "").isdigit()]
        watts = [float(c[3].split()[0]) for c in clocks if c[3].split()[0].replace(".", "").isdigit()]
        row = rows[0] if rows else {}
        detail = (
            f"compare MFU {row.get('mfu')} ({row.get('tokens_per_s')} tokens/s, step "
            f"{row.get('step_time_s_median')} s); SM clock median "
            f"{statistics.median(sm) if sm else None} MHz (min {min(sm) if sm else None}), power median "
            f"{statistics.median(watts) if watts else None} W; profile exit {profile.returncode}: "
            f"{profile.stdout.strip().splitlines()[-1] if profile.stdout.strip() else profile.stderr[-300:]}"
        )
        return [
            Result("gpt13b-profile", bool(rows) and profile.returncode == 0, detail, time.monotonic() - start)
        ]


NCCL_ONE_RANK = """
import os, sys
os.environ.setdefault("TORCH_NCCL_TRACE_BUFFER_SIZE", "2000")  # torch 2.11's name
os.environ.setdefault("TORCH_FR_BUFFER_SIZE", "2000")  # torch 2.13's
import torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
dist.init_process_group("nccl", device_id=torch.device("cuda", 0))
model = DDP(torch.nn.Linear(256, 256).cuda(0))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(20):
    model(torch.randn(64, 256, device="cuda:0")).square().mean().backward()
    opt.step()
    opt.zero_grad()
torch.cuda.synchronize()
os.makedirs(sys.argv[1], exist_ok=True)
c10d = torch._C._distributed_c10d
dumper = getattr(c10d, "_dump_fr_trace", None) or getattr(c10d, "_dump_nccl_trace")
dump = dumper(includeCollectives=True, includeStackTraces=False, onlyActive=False)
with open(os.path.join(sys.argv[1], "rank0"), "wb") as f:
    f.write(dump)
dist.destroy_process_group()
"""
