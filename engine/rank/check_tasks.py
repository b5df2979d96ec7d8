"""The rank side of ``mgpu-tui --check``: collectives, bandwidth and every mode, in one launch.

Each torchrun launch costs seconds, so the orchestrator (``engine/checks.py``)
starts N ranks once and hands them a list of tasks:

    all_reduce, all_gather, reduce_scatter, broadcast   exact results on every rank
    bandwidth[:BYTES]                                   all_reduce algbw and busbw
    sweep                                               all_reduce from 8 B to 256 MiB
    copy_matrix                                         GPU-to-GPU copy bandwidth (rank 0)
    smoke:MODE                                          a few steps of a demo, in this process
    verify:MODE                                         its parameters against the baseline (rank 0)
    scaling:ddp                                         DDP on subgroups of 1..N ranks

The ranks join one process group and keep it; each demo's ``start_distributed``
finds it and joins it (rpc goes last: it adds its own agent beside the group).

Smoke runs write their events (and parameters) under ``--smoke-dir``/MODE.
Results are JSON lines in ``$MGPU_RUN_DIR/checks/rank<N>.jsonl``: rank 0 writes
``{"task", "state": "started"}`` before a task and the result after it. A rank
whose task raises writes the failure to its own file and exits at once, so
torchrun stops the others instead of leaving them blocked in a collective; the
orchestrator then starts a new launch for the tasks left.

A test hook: ``MGPU_CHECK_INJECT=<task>[,<task>]`` makes the last rank corrupt
its result of a collective, or makes a smoke mode raise at step 2 on the last rank.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
import traceback
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F

from mgpu_tui.engine.planning.defaults import DEFAULTS
from mgpu_tui.engine.planning.modes import MODES
from mgpu_tui.engine.planning.shapes import SHAPE_OPTIONS, add_shape_options
from mgpu_tui.engine.protocol.environment import RUN_DIR_ENV
from mgpu_tui.engine.protocol.rundir import RunDir, smoke_folder
from mgpu_tui.engine.rank.bandwidth import check_bandwidth, check_copy_matrix, check_sweep, sync

INJECT_ENV = "MGPU_CHECK_INJECT"
COUNT = 4096  # elements in a correctness check: small, but several chunks per rank


class Results:
    """This rank's result file (one JSON line per record, flushed at once)."""

    def __init__(self, run_dir: Path, rank: int) -> None:
        path = RunDir(run_dir).check_results_path(rank)
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(path, "a", buffering=1)

    def write(self, **record) -> None:
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()


# ---- collectives: every rank's values are exact integers in float32 -----------------


def _pattern(rank: int, count: int = COUNT) -> torch.Tensor:
    """Rank r's contribution: small integers, so sums are exact in float32."""
    return torch.arange(count, dtype=torch.float32) % 97 + 1000 * rank


def _corrupt_if_asked(task: str, rank: int, world: int, tensor: torch.Tensor) -> None:
    if task in _injected() and rank == world - 1:
        tensor.view(-1)[0] += 1  # what a broken link or a buggy reduction would look like


def _injected() -> set[str]:
    return {t.strip() for t in os.environ.get(INJECT_ENV, "").split(",") if t.strip()}


def _collective(task: str, rank: int, world: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Run one collective; return (what this rank got, what it must get)."""
    mine = _pattern(rank).to(device)
    if task == "all_reduce":
        dist.all_reduce(mine, op=dist.ReduceOp.SUM)
        expected = sum((_pattern(r) for r in range(world)), torch.zeros(COUNT))
        return mine, expected
    if task == "all_gather":
        got = [torch.empty_like(mine) for _ in range(world)]
        dist.all_gather(got, mine)
        return torch.cat(got), torch.cat([_pattern(r) for r in range(world)])
    if task == "reduce_scatter":
        # Rank r sends chunk c of its input to rank c; rank c gets the sum of every rank's chunk c.
        chunks = list(_pattern(rank, COUNT * world).to(device).chunk(world))
        received = torch.empty(COUNT, device=device)
        dist.reduce_scatter(received, chunks)
        expected = sum(
            (_pattern(r, COUNT * world).chunk(world)[rank] for r in range(world)), torch.zeros(COUNT)
        )
        return received, expected
    if task == "broadcast":
        src = world - 1  # not rank 0, so a group that ignores src shows up
        dist.broadcast(mine, src=src)
        return mine, _pattern(src)
    raise ValueError(f"unknown collective {task}")


def check_collective(task: str, rank: int, world: int, device: torch.device) -> dict:
    got, expected = _collective(task, rank, world, device)
    _corrupt_if_asked(task, rank, world, got)
    wrong = (got.cpu() != expected).sum().item()
    max_error = (got.cpu() - expected).abs().max().item()
    # Every rank checked its own result; rank 0 learns them all.
    verdicts: list = [None] * world
    dist.all_gather_object(verdicts, (rank, wrong, max_error))
    bad = [(r, n, err) for r, n, err in verdicts if n]
    elements = got.numel()
    if bad:
        r, n, err = bad[0]
        detail = f"rank {r} got {n} of {elements} values wrong (max error {err:g})" + (
            f", and {len(bad) - 1} more rank(s)" if len(bad) > 1 else ""
        )
        return {
            "status": "fail",
            "detail": detail,
            "metrics": {"wrong_ranks": [b[0] for b in bad], "elements": elements},
        }
    return {
        "status": "pass",
        "detail": f"exact on {world} rank(s), {elements} float32 values each",
        "metrics": {"elements": elements, "world_size": world},
    }


# ---- smoke: a demo's own main(), in this process -----------------------------------


def model_argv(args: argparse.Namespace) -> list[str]:
    """--model and the GPT's shape flags, as the demos take them."""
    argv = ["--model", args.model]
    for field in SHAPE_OPTIONS:
        if getattr(args, field) is not None:
            argv += [f"--{field.replace('_', '-')}", str(getattr(args, field))]
    return argv


def smoke(mode: str, args: argparse.Namespace, run_dir: Path, rank: int, world: int) -> dict:
    """Run demo ``mode`` for a few steps; its events go to ``smoke/<mode>/`` for the orchestrator."""
    multi = MODES[mode].multi_process
    argv = [
        mode,
        "--steps",
        str(args.steps),
        "--device",
        args.device,
        "--batch-size",
        str(args.batch_size),
        *model_argv(args),
        *MODES[mode].demo_flags,
    ]
    if args.share_gpus:
        argv.append("--share-gpus")
    if f"smoke:{mode}" in _injected():
        argv += ["--fail-at-step", "2", "--fail-rank", str(world - 1 if multi else 0)]
    if args.save_params:  # for verify:MODE later in this launch
        argv += ["--save-params", str(RunDir(smoke_folder(args.smoke_dir, mode)).params_dir)]
    start = time.perf_counter()
    if multi or rank == 0:  # a one-process mode runs on rank 0 while the others wait
        os.environ[RUN_DIR_ENV] = str(args.smoke_dir / mode)
        sys.argv = argv  # the demo parses its own arguments, exactly as when run alone
        main = importlib.import_module(MODES[mode].module).main
        getattr(main, "__wrapped__", main)()  # past @record: a failure here is ours to report
    dist.barrier()
    return {"status": "ran", "seconds": time.perf_counter() - start}


_baseline: dict | None = None


def check_verify(mode: str, args: argparse.Namespace, run_dir: Path) -> dict:
    """Compare what smoke:MODE saved with the baseline, trained once here with the same arguments."""
    from mgpu_tui.demos import harness, single, verify

    global _baseline
    if _baseline is None:
        argv = [
            "--steps",
            str(args.steps),
            "--device",
            args.device,
            "--batch-size",
            str(args.batch_size),
            *model_argv(args),
        ]
        baseline_args = harness.parse_args("baseline", argv=argv)
        _baseline = {k: v.detach().cpu().float() for k, v in single.train(baseline_args).state_dict().items()}
    params = verify.load_parts(RunDir(smoke_folder(args.smoke_dir, mode)).params_dir)
    if not params:
        return {"status": "fail", "detail": "its smoke run saved no parameters", "metrics": {}}
    outcome = verify.compare(params, _baseline, verify.TOLERANCE["float32"])
    detail = (
        f"max abs diff {outcome['max_abs_diff']:.1e} vs the baseline "
        f"(tolerance {outcome['tolerance']:.0e}, {outcome['compared']} tensors)"
    )
    if outcome["missing"] or outcome["unexpected"]:
        detail += f"; missing {outcome['missing']}, unexpected {outcome['unexpected']}"
    metrics = {k: outcome[k] for k in ("max_abs_diff", "max_rel_diff", "tolerance", "compared")}
    return {"status": "pass" if outcome["ok"] else "fail", "detail": detail, "metrics": metrics}


def check_scaling(args: argparse.Namespace, rank: int, world: int, device: torch.device) -> dict:
    """DDP with the same global batch on the first k ranks, k = 1..N: throughput, speedup, efficiency.

    Every k runs inside this launch on a subgroup, so no extra torchrun start is paid.
    efficiency(k) = throughput(k) / (k x throughput(1)).
    """
    from torch.nn.parallel import DistributedDataParallel as DDP

    from mgpu_tui.demos import harness

    train_args = harness.parse_args("scaling", argv=["--device", device.type])
    task = harness.SyntheticTask(train_args)
    steps, warmup = 30, 5
    points = []
    for k in range(1, world + 1):
        group = dist.new_group(list(range(k)))  # every rank takes part in creating it
        seconds = torch.zeros(1, dtype=torch.float64, device=device)
        local = args.batch_size // k
        if rank < k:
            model = DDP(
                harness.build_model(train_args).to(device),
                device_ids=[device.index] if device.type == "cuda" else None,
                process_group=group,
            )
            optimizer = torch.optim.SGD(model.parameters(), lr=train_args.lr)
            scaler = harness.grad_scaler(train_args, device)
            for step in range(1, steps + 1):
                if step == warmup + 1:
                    sync(device)
                    start = time.perf_counter()
                x, y = task.batch(step, local * k)
                mine = slice(rank * local, (rank + 1) * local)
                optimizer.zero_grad(set_to_none=True)
                loss = F.cross_entropy(model(x[mine].to(device)), y[mine].to(device))
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
            sync(device)
            seconds[0] = time.perf_counter() - start
            dist.all_reduce(seconds, op=dist.ReduceOp.MAX, group=group)
            del model, optimizer
        dist.barrier()
        rate = local * k * (steps - warmup) / seconds.item() if rank == 0 else 0.0
        points.append({"nproc": k, "samples_per_s": rate})
    if rank != 0:
        return {}
    base = points[0]["samples_per_s"]
    for p in points:
        p["speedup"] = p["samples_per_s"] / base
        p["efficiency"] = p["speedup"] / p["nproc"]
    last = points[-1]
    detail = (
        f"ddp, global batch {args.batch_size}: {last['nproc']} rank(s) run {last['speedup']:.2f}x "
        f"the speed of one (efficiency {100 * last['efficiency']:.0f}%)"
    )
    if device.type == "cuda" and args.share_gpus and world > torch.cuda.device_count():
        detail += "; the ranks share GPUs, so this says nothing of a box with a GPU for each"
    return {"status": "pass", "detail": detail, "metrics": {"points": points}}


# ---- the loop ------------------------------------------------------------------


def run_task(
    task: str, args: argparse.Namespace, run_dir: Path, rank: int, world: int, device: torch.device
) -> dict:
    name, _, arg = task.partition(":")
    if name in ("all_reduce", "all_gather", "reduce_scatter", "broadcast"):
        return check_collective(name, rank, world, device)
    if name == "bandwidth":
        return check_bandwidth(int(arg or 2**24), world, device)
    if name == "sweep":
        return check_sweep(world, device)
    if name == "copy_matrix":
        outcome = check_copy_matrix(device) if rank == 0 else {}
        dist.barrier()
        return outcome
    if name == "smoke":
        return smoke(arg, args, run_dir, rank, world)
    if name == "verify":
        outcome = check_verify(arg, args, run_dir) if rank == 0 else {}
        dist.barrier()
        return outcome
    if name == "scaling":
        return check_scaling(args, rank, world, device)
    raise ValueError(f"unknown task {task!r}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", required=True, help="comma-separated tasks, run in order")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--steps", type=int, default=12, help="steps of each smoke run")
    parser.add_argument("--batch-size", type=int, default=DEFAULTS.batch_size)
    parser.add_argument("--save-params", action="store_true", help="smoke runs save parameters, to verify")
    parser.add_argument("--model", default="mlp", help="what the smoke runs train (the demos' --model)")
    add_shape_options(parser)
    parser.add_argument(
        "--share-gpus",
        action="store_true",
        help="ranks share GPUs round-robin when there are fewer GPUs than ranks (gloo)",
    )
    # Outside the launch's own folder: a later launch (after a crash) verifies what an earlier one saved.
    parser.add_argument("--smoke-dir", type=Path, required=True, help="where smoke runs write")
    return parser.parse_args(argv)


def main() -> None:
    args = parse_args()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    run_dir = Path(os.environ[RUN_DIR_ENV])
    if args.device == "cuda":
        gpus = torch.cuda.device_count()
        device = torch.device("cuda", local_rank % gpus if args.share_gpus else local_rank)
        torch.cuda.set_device(device)
        local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world))
        if args.share_gpus and local_world > gpus:  # NCCL refuses two ranks on one GPU
            dist.init_process_group("gloo")
        else:
            dist.init_process_group("nccl", device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    results = Results(run_dir, rank)
    for task in args.tasks.split(","):
        if rank == 0:
            results.write(task=task, state="started", t=time.time())
        start = time.perf_counter()
        try:
            outcome = run_task(task, args, run_dir, rank, world, device)
        except BaseException as exc:  # noqa: BLE001 (reported, then this rank exits)
            message = traceback.format_exception_only(type(exc), exc)[-1].strip()
            # "t" lets the orchestrator tell the first failure from the peers' lost connections.
            results.write(
                task=task,
                state="failed",
                rank=rank,
                t=time.time(),
                detail=f"rank {rank}: {message}",
                traceback=traceback.format_exc(),
            )
            # Leave now: peers blocked in a collective are stopped by torchrun.
            os._exit(1)
        if rank == 0:
            outcome.setdefault("seconds", time.perf_counter() - start)
            results.write(task=task, state="finished", **outcome)
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
