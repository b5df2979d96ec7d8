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
                   the third round's (scripts/gpu_checks/launchers.py and round3.py say what each does)

Every command's output goes to --out (default runs/gpu-check-<time>/) with report.json.
Exit codes: 0 every check passed, 1 a check failed, 2 usage, 3 no NVIDIA GPU (or no CUDA torch).
The mode runs go several at a time (--jobs): their timings are not the point here.
This file needs only the standard library until it knows there is a GPU.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_checks.app_check import AppCheck  # noqa: E402
from gpu_checks.base import ROOT, SCRIPT_PAIRS, Result  # noqa: E402
from gpu_checks.compare_runs import CompareChecks  # noqa: E402
from gpu_checks.launchers import LauncherChecks  # noqa: E402
from gpu_checks.machine_checks import MachineChecks  # noqa: E402
from gpu_checks.nccl_check import NcclChecks  # noqa: E402
from gpu_checks.round3 import Round3Checks  # noqa: E402
from gpu_checks.script_check import ScriptChecks  # noqa: E402
from gpu_checks.suites import SuiteChecks  # noqa: E402


class Checker(
    SuiteChecks,
    Round3Checks,  # before CompareChecks, whose run it uses (a subclass before its base)
    CompareChecks,
    NcclChecks,
    ScriptChecks,
    MachineChecks,
    AppCheck,
    LauncherChecks,
):
    """Every check, one module of gpu_checks/ each (their concerns are their docstrings')."""


# Each check by its name, in the order they run (--only picks, in its own order).
CHECKS: dict[str, Callable[[Checker], Result | list[Result]]] = {
    "check-level3": Checker.check_level3,
    "check-shared": Checker.check_shared,
    "modes": Checker.mode_runs,
    "oom": Checker.oom,
    "compare": Checker.compare,
    "transformer": Checker.transformer,
    "nccl": Checker.nccl,
    "script": Checker.script,
    "fr-hang": Checker.fr_hang,
    "topology": Checker.topology,
    "sampler-cost": Checker.sampler_cost,
    "telemetry": Checker.telemetry,
    "app": Checker.app,
    "launchers": Checker.launchers,
    "script-mfu": Checker.script_mfu,
    "input-bound": Checker.input_bound,
    "fr-versions": lambda checker: checker.fr_versions(checker.fr_gloo_run_dir),
    "speed": Checker.speed,
    "gpt13b-profile": Checker.gpt13b_profile,
}


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
        order = [n for n in args.only.split(",") if n in CHECKS] if args.only else list(CHECKS)
        for name in order:
            if args.budget is not None and time.monotonic() - started > args.budget:
                checker.add(Result(name, None, f"skipped: the budget of {args.budget:.0f} s was spent"))
                continue
            try:
                outcome = CHECKS[name](checker)
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
