"""--verify: compare a mode's trained parameters with the single-device baseline.

Retrains the baseline (``single.train``) with the same arguments (seed, data,
global batch, precision), merges the parameter files the mode's ranks saved,
and prints one JSON line: max_abs_diff, max_rel_diff, tolerance, ok.

Tolerances, per precision:
- float32: 1e-5 absolute. The modes compute the same sums in other orders
  (per-rank partial gradients, then an all-reduce), which changes float32
  rounding in the last bits only.
- AMP (bf16 on the CPU, fp16 or bf16 on CUDA): 2e-3 absolute. Activations are
  rounded to 8 (bf16) or 11 (fp16) significant bits, and rounding in a different
  order can flip a last bit; bf16's relative step is 2^-8 = 3.9e-3 of a value, and
  it reaches the parameters only through lr x gradient updates.

max_rel_diff is, per tensor, the largest absolute difference over the largest
baseline magnitude, then the largest over tensors.
"""

import json
import sys
from pathlib import Path

import torch

from mgpu_tui.demos import harness, single
from mgpu_tui.engine.protocol.rundir import params_files

TOLERANCE = {"float32": 1e-5, "amp": 2e-3}


def load_parts(directory: Path) -> dict[str, torch.Tensor]:
    merged: dict[str, torch.Tensor] = {}
    for part in params_files(directory):
        merged.update(torch.load(part))
    return merged


def compare(params: dict[str, torch.Tensor], baseline: dict[str, torch.Tensor], tolerance: float) -> dict:
    missing = sorted(baseline.keys() - params.keys())
    unexpected = sorted(params.keys() - baseline.keys())
    max_abs = max_rel = 0.0
    for name in baseline.keys() & params.keys():
        ref, got = baseline[name].float(), params[name].float()
        if ref.shape != got.shape:
            unexpected.append(f"{name} (shape {tuple(got.shape)}, baseline {tuple(ref.shape)})")
            continue
        diff = (got - ref).abs().max().item()
        max_abs = max(max_abs, diff)
        max_rel = max(max_rel, diff / max(ref.abs().max().item(), 1e-12))
    return {
        "max_abs_diff": max_abs,
        "max_rel_diff": max_rel,
        "tolerance": tolerance,
        "compared": len(baseline.keys() & params.keys()),
        "missing": missing,
        "unexpected": unexpected,
        "ok": not missing and not unexpected and max_abs <= tolerance,
    }


def main() -> None:
    def verify_args(parser):
        parser.add_argument("--params-dir", required=True, type=Path)

    # Mode-specific flags (--schedule, --stages, ...) do not change what the baseline trains.
    args = harness.parse_args(__doc__.splitlines()[0], mode_args=verify_args, known_only=True)
    params = load_parts(args.params_dir)
    if not params:
        print(json.dumps({"ok": False, "error": f"no parameter files in {args.params_dir}"}))
        sys.exit(1)
    baseline = {k: v.detach().cpu().float() for k, v in single.train(args).state_dict().items()}
    result = compare(params, baseline, TOLERANCE["amp" if args.amp else "float32"])
    result["precision"] = "amp" if args.amp else "float32"
    print(json.dumps(result))


if __name__ == "__main__":
    main()
