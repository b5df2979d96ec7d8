"""Whole jobs, bare against watched, measured from outside: ``job-costs`` on the shapes users have,
and ``overhead`` and ``transformer`` on the demos (the same demo under bare torchrun and under
mgpu-tui run, alternated pair by pair: bench/run.py says the goals).

job-costs:

Each shape is a command run bare and watched, the same job at two lengths (``short`` and ``long``
steps), all four launches alternated round by round so that a drift of the machine falls on each
alike. From outside: the wall time of the whole process tree, start to exit. Then:

- **a step's cost**: ((watched - bare) at the long length - (watched - bare) at the short one) /
  (long - short), per round, the median of the rounds;
- **the fixed cost** (start and end): (watched - bare) at the short length - short x the step's cost;
- **noise**: how far apart two bare runs of the same length are (the median absolute difference of
  consecutive rounds' bare times, per step for the step's figure): a cost below it is not measured.

The shapes:

- ``exec``: one process, a 3-layer MLP with AdamW and a DataLoader (steps of a few ms), bare
  ``python job.py`` against ``mgpu-tui exec -- python job.py``;
- ``drop-in``: the same model under DDP, 2 ranks, ``torchrun`` against ``mgpu-tui torchrun``;
- ``trainer``: a Hugging Face Trainer step (a small GPT-2 from its config), one process, under
  ``exec`` (where transformers is installed: ``make .venv/.installed-frameworks``);
- ``gpt-demo``: the GPT demo (``--model gpt-tiny``), 2 ranks, bare torchrun against ``mgpu-tui run``.

Every process runs with OMP_NUM_THREADS=1 (two ranks on two cores). Goals (issue 58): a steady step
<= 1% of bare's; the fixed cost <= 0.5 s for the 2-rank drop-in job.
"""

from __future__ import annotations

import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from common import CLI, clean_env, table

from mgpu_tui.engine.planning.shapes import MODELS
from mgpu_tui.engine.run.figures.aggregate import read_events

MLP_JOB = """\
import sys, os, torch
from torch.utils.data import DataLoader, TensorDataset
steps = int(sys.argv[1])
torch.manual_seed(0)
world = int(os.environ.get("WORLD_SIZE", "1"))
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512),
                            torch.nn.ReLU(), torch.nn.Linear(512, 10))
if world > 1:
    torch.distributed.init_process_group("gloo")
    model = torch.nn.parallel.DistributedDataParallel(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
x = torch.randn(64 * steps, 256)
y = torch.randint(0, 10, (64 * steps,))
for xb, yb in DataLoader(TensorDataset(x, y), batch_size=64):
    loss = torch.nn.functional.cross_entropy(model(xb), yb)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
if world > 1:
    torch.distributed.destroy_process_group()
"""

TRAINER_JOB = """\
import sys, tempfile, torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments
steps = int(sys.argv[1])
class Tokens(torch.utils.data.Dataset):
    def __init__(self, n):
        self.ids = torch.randint(0, 100, (n, 32), generator=torch.Generator().manual_seed(0))
    def __len__(self):
        return len(self.ids)
    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}
torch.manual_seed(0)
model = GPT2LMHeadModel(GPT2Config(vocab_size=100, n_positions=32, n_embd=64, n_layer=2, n_head=2))
with tempfile.TemporaryDirectory() as out:
    args = TrainingArguments(output_dir=out, per_device_train_batch_size=8, max_steps=steps,
                             logging_steps=10**6, report_to=[], save_strategy="no", use_cpu=True,
                             disable_tqdm=True, dataloader_num_workers=0)
    Trainer(model=model, args=args, train_dataset=Tokens(8 * steps)).train()
"""

# A launch line, given the job's script (or None for the demo), its steps and a run folder.
Launch = Callable[[Path, int, Path], list[str]]


def _torchrun(script: Path, steps: int, runs: Path) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
            str(script), str(steps)]  # fmt: skip


def _demo_bare(script: Path, steps: int, runs: Path) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
            "-m", "mgpu_tui.demos.ddp", *_demo_flags(steps)]  # fmt: skip


def _demo_flags(steps: int) -> list[str]:
    return ["--model", "gpt-tiny", "--steps", str(steps), "--batch-size", "16", "--device", "cpu"]


SHAPES: dict[str, tuple[str | None, Launch, Launch, tuple[int, int]]] = {
    # name: (the job's script, its bare line, its watched line, the two lengths in steps)
    "exec": (
        MLP_JOB,
        lambda s, n, r: [sys.executable, str(s), str(n)],
        lambda s, n, r: [CLI, "exec", "--run-dir", str(r), "--", sys.executable, str(s), str(n)],
        (50, 1050),
    ),
    "drop-in": (
        MLP_JOB,
        _torchrun,
        lambda s, n, r: [CLI, "torchrun", "--run-dir", str(r), "--nproc-per-node", "2", str(s), str(n)],
        (20, 420),
    ),
    "trainer": (
        TRAINER_JOB,
        lambda s, n, r: [sys.executable, str(s), str(n)],
        lambda s, n, r: [CLI, "exec", "--run-dir", str(r), "--", sys.executable, str(s), str(n)],
        (10, 210),
    ),
    "gpt-demo": (
        None,
        _demo_bare,
        lambda s, n, r: [CLI, "run", "ddp", "--nproc", "2", "--run-dir", str(r), *_demo_flags(n)],
        (20, 220),
    ),
}


def _wall(argv: list[str], cwd: str, env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - started


def measure(shape: str, rounds: int) -> dict[str, float]:
    """One shape's costs (seconds): step, fixed, and the bare runs' noise, with the bare step."""
    text, bare, watched, (short, long) = SHAPES[shape]
    env = {**clean_env(), "OMP_NUM_THREADS": "1"}
    walls: dict[tuple[str, int], list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        script, runs = Path(tmp, "job.py"), Path(tmp, "runs")
        script.write_text(text or "")
        for _ in range(rounds):
            for steps in (short, long):
                for how, line in (("bare", bare), ("watched", watched)):
                    walls.setdefault((how, steps), []).append(_wall(line(script, steps, runs), tmp, env))
                    subprocess.run(["rm", "-rf", str(runs)], check=True)
    span = long - short
    added = {n: [w - b for w, b in zip(walls["watched", n], walls["bare", n])] for n in (short, long)}
    step_costs = [(added[long][i] - added[short][i]) / span for i in range(rounds)]
    step = statistics.median(step_costs)
    fixed = statistics.median(added[short][i] - short * step for i in range(rounds))
    bare_step = statistics.median(
        (walls["bare", long][i] - walls["bare", short][i]) / span for i in range(rounds)
    )
    bares = walls["bare", long]
    noise = statistics.median([abs(a - b) for a, b in zip(bares, bares[1:])] or [float("nan")])
    return {"step": step, "bare_step": bare_step, "fixed": fixed, "noise": noise, "noise_step": noise / span}


def bench_job_costs(rounds: int, shapes: tuple[str, ...] = tuple(SHAPES)) -> tuple[str, list]:
    rows = []
    for shape in shapes:
        if shape == "trainer" and importlib.util.find_spec("transformers") is None:
            missing = "n/a: transformers is not installed (make .venv/.installed-frameworks)"
            rows.append([shape, missing, "", "", ""])
            continue
        got = measure(shape, rounds)
        share = got["step"] / got["bare_step"] if got["bare_step"] > 0 else float("nan")
        rows.append([
            shape,
            f"{got['bare_step'] * 1e3:.2f} ms",
            f"{got['step'] * 1e6:+.0f} us ({share:+.1%}), noise {got['noise_step'] * 1e6:.0f} us",
            f"{got['fixed']:+.2f} s, noise {got['noise']:.2f} s",
            str(rounds),
        ])  # fmt: skip
    title = (
        "job-costs: a whole job, bare and watched, from outside (alternated rounds; step from two lengths;"
        " noise: bare against bare)"
    )
    return title, rows


# ---- overhead and transformer: the demos -------------------------------------------------


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
