"""What a GPU can do at most: its dense peak FLOP/s per precision, the denominator of MFU.

One table, each row from its maker's datasheet (named in ``source``). The datasheets print the
tensor-core figures with 2:4 structured sparsity (marked with an asterisk); the dense figure used
here is half of it, as the datasheets' footnotes say. Plain fp32 is the non-tensor-core figure;
fp32 matrix multiplies run on tensor cores in TF32 when torch allows it
(``torch.backends.cuda.matmul.allow_tf32``, or a float32 matmul precision of "high" or "medium"),
and then the TF32 peak is the one (the rank says which precision it ran in: rank/watch/flops/).

A GPU is matched on its whole name as NVML and torch give it, never on a part of it: "NVIDIA H100
NVL" is not an H100 SXM. A MIG slice, a GPU not in the table, a precision a GPU has no figure for
(fp8 before Hopper and Ada) and the CPU have no peak: MFU is then n/a, with :func:`peak`'s reason.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

PRECISIONS = ("fp32", "tf32", "bf16", "fp16", "fp8")


@dataclass(frozen=True)
class GpuPeaks:
    model: str
    names: str  # a regular expression the whole NVML name matches
    dense: dict[str, float]  # precision -> FLOP/s
    source: str


def _t(**tflops: float) -> dict[str, float]:
    return {precision: value * 1e12 for precision, value in tflops.items()}


TABLE = (
    GpuPeaks(
        "H100 SXM",
        r"NVIDIA H100 80GB HBM3|NVIDIA H100 SXM5? ?80GB",
        _t(fp32=67, tf32=494.5, bf16=989.5, fp16=989.5, fp8=1979),
        "NVIDIA H100 Tensor Core GPU datasheet, H100 SXM: FP32 67, TF32 989*, BF16 and FP16 "
        "1,979*, FP8 3,958* TFLOPS (* with sparsity)",
    ),
    GpuPeaks(
        "H100 PCIe",
        r"NVIDIA H100 PCIe",
        _t(fp32=51, tf32=378, bf16=756.5, fp16=756.5, fp8=1513),
        "NVIDIA H100 Tensor Core GPU datasheet, H100 PCIe: FP32 51, TF32 756*, BF16 and FP16 "
        "1,513*, FP8 3,026* TFLOPS",
    ),
    GpuPeaks(
        "H100 NVL",
        r"NVIDIA H100 NVL",
        _t(fp32=60, tf32=417.5, bf16=835.5, fp16=835.5, fp8=1670.5),
        "NVIDIA H100 Tensor Core GPU datasheet, H100 NVL: FP32 60, TF32 835*, BF16 and FP16 "
        "1,671*, FP8 3,341* TFLOPS",
    ),
    GpuPeaks(
        "H200 SXM",
        r"NVIDIA H200|NVIDIA H200 141GB HBM3e",
        _t(fp32=67, tf32=494.5, bf16=989.5, fp16=989.5, fp8=1979),
        "NVIDIA H200 Tensor Core GPU datasheet, H200 SXM: FP32 67, TF32 989*, BF16 and FP16 "
        "1,979*, FP8 3,958* TFLOPS",
    ),
    GpuPeaks(
        "H200 NVL",
        r"NVIDIA H200 NVL",
        _t(fp32=60, tf32=417.5, bf16=835.5, fp16=835.5, fp8=1670.5),
        "NVIDIA H200 Tensor Core GPU datasheet, H200 NVL: FP32 60, TF32 835*, BF16 and FP16 "
        "1,671*, FP8 3,341* TFLOPS",
    ),
    GpuPeaks(
        "A100",
        r"NVIDIA A100-SXM4-(40|80)GB|NVIDIA A100-PCIE-40GB|NVIDIA A100 80GB PCIe",
        _t(fp32=19.5, tf32=156, bf16=312, fp16=312),
        "NVIDIA A100 Tensor Core GPU datasheet, 40 and 80 GB, PCIe and SXM alike: FP32 19.5, TF32 "
        "156 | 312*, BF16 and FP16 312 | 624* TFLOPS; no FP8",
    ),
    GpuPeaks(
        "L40S",
        r"NVIDIA L40S",
        _t(fp32=91.6, tf32=183, bf16=362.05, fp16=362.05, fp8=733),
        "NVIDIA L40S datasheet: FP32 91.6, TF32 183 | 366*, BF16 and FP16 362.05 | 733*, FP8 "
        "733 | 1,466* TFLOPS",
    ),
    GpuPeaks(
        "L4",
        r"NVIDIA L4",
        _t(fp32=30.3, tf32=60, bf16=121, fp16=121, fp8=242.5),
        "NVIDIA L4 Tensor Core GPU datasheet: FP32 30.3, TF32 120*, BF16 and FP16 242*, FP8 485* TFLOPS",
    ),
    GpuPeaks(
        "RTX 4090",
        r"NVIDIA GeForce RTX 4090",
        _t(fp32=82.6, tf32=82.6, bf16=165.2, fp16=165.2, fp8=330.3),
        "NVIDIA Ada Lovelace GPU architecture whitepaper, appendix A, RTX 4090: FP32 82.6, TF32 "
        "82.6, FP16 and BF16 with FP32 accumulate 165.2, FP8 with FP32 accumulate 330.3 TFLOPS "
        "dense (torch accumulates in FP32)",
    ),
    GpuPeaks(
        "B200",
        r"NVIDIA B200",
        _t(fp32=75, tf32=1125, bf16=2250, fp16=2250, fp8=4500),
        "NVIDIA HGX B200 datasheet, the 8-GPU board divided by 8: FP32 600 TFLOPS, TF32 18*, "
        "BF16 and FP16 36*, FP8 72* PFLOPS",
    ),
)
_MIG = re.compile(r"\bMIG\b")


def find(gpu_name: str | None) -> GpuPeaks | None:
    """The table's row for the GPU of this name (the whole name, spaces trimmed), else None."""
    if not gpu_name:
        return None
    name = " ".join(gpu_name.split())
    for row in TABLE:
        if re.fullmatch(row.names, name):
            return row
    return None


def peak(gpu_name: str | None, precision: str | None) -> tuple[float | None, str | None]:
    """(the dense peak FLOP/s, None), or (None, why there is none) for the device's name and the
    precision its step runs in (PRECISIONS; None for the CPU or a device not known)."""
    if not gpu_name:
        return None, "the CPU has no peak in the table"
    if _MIG.search(gpu_name):
        return None, f"{gpu_name} is a MIG slice, whose share of the GPU's peak is not in the table"
    row = find(gpu_name)
    if row is None:
        return None, f"{gpu_name} is not in the table of peaks (docs/your-script.md lists them)"
    if precision not in row.dense:
        return None, f"the {row.model}'s datasheet gives no {precision or 'such'} peak"
    return row.dense[precision], None
