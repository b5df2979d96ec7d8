"""overhead and transformer: the same demo under bare torchrun and under mgpu-tui run, alternated pair
by pair (bench/run.py says the goals)."""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import CLI, clean_env, table

from mgpu_tui.engine.planning.shapes import MODELS
from mgpu_tui.engine.run.figures.aggregate import read_events


def _bare(work: Path, demo_flags: list[str], nproc: int) -> dict:
    run_dir = work / f"bare-{time.monotonic_ns()}"
    run_dir.mkdir()
    env = clean_env() | {"MGPU_RUN_DIR": str(run_dir)}
    argv = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        str(nproc),
        "-m",
        "mgpu_tui.demos.ddp",
        *demo_flags,
    ]
    started = time.time()
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return _measure(run_dir, started, time.time())


def _engine(work: Path, demo_flags: list[str], nproc: int) -> dict:
    root = work / f"engine-{time.monotonic_ns()}"
    argv = [CLI, "run", "ddp", "--nproc", str(nproc), "--run-dir", str(root), *demo_flags]
    started = time.time()
    subprocess.run(argv, env=clean_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    ended = time.time()
    (run_dir,) = root.iterdir()
    return _measure(run_dir, started, ended)


def _measure(run_dir: Path, started: float, ended: float) -> dict:
    stats = read_events(run_dir).stats()
    return {
        "wall": ended - started,
        "first_step": stats.first_step_t - started,
        "throughput": stats.samples_per_s,
    }


def bench_overhead(pairs: int, steps: int, nproc: int, model: str = "mlp") -> str:
    demo_flags = ["--steps", str(steps), "--batch-size", "64", "--device", "cpu", "--model", model]
    tokens = MODELS[model].seq_len if model in MODELS else 0
    rows, bare_all, engine_all = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        _bare(work, ["--steps", "5", "--device", "cpu", "--model", model], nproc)  # warm the file cache once
        for i in range(pairs):
            # Alternate which goes first, so neither always runs on a warmer machine.
            first, second = (_bare, _engine) if i % 2 == 0 else (_engine, _bare)
            a = first(work, demo_flags, nproc)
            b = second(work, demo_flags, nproc)
            bare, engine = (a, b) if first is _bare else (b, a)
            bare_all.append(bare)
            engine_all.append(engine)
            rows.append(
                [
                    i + 1,
                    f"{bare['throughput']:,.0f}",
                    f"{engine['throughput']:,.0f}",
                    f"{engine['throughput'] / bare['throughput']:.3f}",
                    f"{bare['first_step']:.2f}",
                    f"{engine['first_step']:.2f}",
                    f"{engine['first_step'] - bare['first_step']:+.2f}",
                    f"{bare['wall']:.2f}",
                    f"{engine['wall']:.2f}",
                    f"{engine['wall'] / bare['wall']:.3f}",
                ]
            )

    def med(runs, key):
        return statistics.median(r[key] for r in runs)

    rows.append(
        [
            "median",
            f"{med(bare_all, 'throughput'):,.0f}",
            f"{med(engine_all, 'throughput'):,.0f}",
            f"{med(engine_all, 'throughput') / med(bare_all, 'throughput'):.3f}",
            f"{med(bare_all, 'first_step'):.2f}",
            f"{med(engine_all, 'first_step'):.2f}",
            f"{med(engine_all, 'first_step') - med(bare_all, 'first_step'):+.2f}",
            f"{med(bare_all, 'wall'):.2f}",
            f"{med(engine_all, 'wall'):.2f}",
            f"{med(engine_all, 'wall') / med(bare_all, 'wall'):.3f}",
        ]
    )
    headers = [
        "pair",
        "bare samples/s",
        "mgpu-tui samples/s",
        "ratio",
        "bare 1st step s",
        "mgpu-tui 1st step s",
        "diff s",
        "bare wall s",
        "mgpu-tui wall s",
        "wall ratio",
    ]
    title = (
        f"engine overhead: ddp on {model}, {nproc} ranks, {steps} steps, global batch 64, cpu/gloo; "
        f"goals: ratio >= 0.99, 1st-step diff <= +0.20 s, wall ratio <= 1.05"
    )
    if tokens:
        title += (
            f"\n(tokens/s = samples/s x {tokens}: bare {med(bare_all, 'throughput') * tokens:,.0f}, "
            f"mgpu-tui {med(engine_all, 'throughput') * tokens:,.0f})"
        )
    return title + "\n" + table(headers, rows)
