"""script and fr-hang: an unchanged compiled GPT script through run --script and the drop-in against
bare, and ranks sharing the GPU over gloo with one stuck."""

from __future__ import annotations

import json
import re
import signal
import statistics
import subprocess
import time
from pathlib import Path

from gpu_checks.base import ROOT, CheckerBase, Result, last_summary
from mgpu_tui.engine.protocol.rundir import RunDir

# The unchanged script on the GPU: a GPT big enough that a step is not launch-bound, compiled.
SCRIPT_ARGS = [
    "--compile",
    "--n-layer", "6", "--n-embd", "512", "--n-head", "8", "--block-size", "256",
    "--batch-size", "32", "--grad-accum", "2", "--max-iters", "60",
    "--eval-interval", "30", "--eval-iters", "4",
]  # fmt: skip


ITER_LINE = re.compile(r"iter (\d+): loss ([\d.]+), time ([\d.]+)ms(?:, mem ([\d.]+)MiB)?")


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


class ScriptChecks(CheckerBase):
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
        return [
            _against_bare(ours, bare, seen, self.pairs)
            for ours, bare in (("run", "run-bare"), ("torchrun", "torchrun-bare"))
        ]

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
        assert proc.stderr is not None  # a pipe, asked for above
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


def _against_bare(ours: str, bare: str, seen: dict[str, list[dict]], pairs: int) -> Result:
    """One launch line against its bare twin, over the pairs: speed, figures, graph breaks."""
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
        and len(ratios) == pairs
        and len(agree) == pairs
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
    return Result(f"script:{ours}", ok, detail, 0.0, {"ratios": ratios, "runs": seen[ours]})
