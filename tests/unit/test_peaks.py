"""Issue 42: the one table of GPU peaks (engine/machine/peaks.py), each figure against the datasheet
it names: tensor-core figures printed with 2:4 sparsity (an asterisk there) are halved, plain FP32
is as printed; a GPU is known by its whole name."""

import pytest

from mgpu_tui.engine.machine import peaks

SPARSE, DENSE = 2, 1  # what the datasheet's figure is divided by to give the dense peak
DATASHEETS = [
    # (NVML name, precision, the datasheet's figure in TFLOPS, how it is printed)
    ("NVIDIA H100 80GB HBM3", "fp32", 67, DENSE),
    ("NVIDIA H100 80GB HBM3", "tf32", 989, SPARSE),
    ("NVIDIA H100 80GB HBM3", "bf16", 1979, SPARSE),
    ("NVIDIA H100 80GB HBM3", "fp16", 1979, SPARSE),
    ("NVIDIA H100 80GB HBM3", "fp8", 3958, SPARSE),
    ("NVIDIA H100 PCIe", "fp32", 51, DENSE),
    ("NVIDIA H100 PCIe", "tf32", 756, SPARSE),
    ("NVIDIA H100 PCIe", "bf16", 1513, SPARSE),
    ("NVIDIA H100 PCIe", "fp16", 1513, SPARSE),
    ("NVIDIA H100 PCIe", "fp8", 3026, SPARSE),
    ("NVIDIA H100 NVL", "fp32", 60, DENSE),
    ("NVIDIA H100 NVL", "tf32", 835, SPARSE),
    ("NVIDIA H100 NVL", "bf16", 1671, SPARSE),
    ("NVIDIA H100 NVL", "fp16", 1671, SPARSE),
    ("NVIDIA H100 NVL", "fp8", 3341, SPARSE),
    ("NVIDIA H200", "fp32", 67, DENSE),
    ("NVIDIA H200", "tf32", 989, SPARSE),
    ("NVIDIA H200", "bf16", 1979, SPARSE),
    ("NVIDIA H200", "fp16", 1979, SPARSE),
    ("NVIDIA H200", "fp8", 3958, SPARSE),
    ("NVIDIA H200 NVL", "fp32", 60, DENSE),
    ("NVIDIA H200 NVL", "bf16", 1671, SPARSE),
    ("NVIDIA H200 NVL", "fp8", 3341, SPARSE),
    ("NVIDIA A100-SXM4-80GB", "fp32", 19.5, DENSE),
    ("NVIDIA A100-SXM4-40GB", "tf32", 312, SPARSE),
    ("NVIDIA A100-PCIE-40GB", "bf16", 624, SPARSE),
    ("NVIDIA A100 80GB PCIe", "fp16", 624, SPARSE),
    ("NVIDIA L40S", "fp32", 91.6, DENSE),
    ("NVIDIA L40S", "tf32", 366, SPARSE),
    ("NVIDIA L40S", "bf16", 362.05, DENSE),
    ("NVIDIA L40S", "fp8", 1466, SPARSE),
    ("NVIDIA L4", "fp32", 30.3, DENSE),
    ("NVIDIA L4", "tf32", 120, SPARSE),
    ("NVIDIA L4", "bf16", 242, SPARSE),
    ("NVIDIA L4", "fp8", 485, SPARSE),
    ("NVIDIA GeForce RTX 4090", "fp32", 82.6, DENSE),
    ("NVIDIA GeForce RTX 4090", "tf32", 82.6, DENSE),
    ("NVIDIA GeForce RTX 4090", "bf16", 165.2, DENSE),
    ("NVIDIA GeForce RTX 4090", "fp8", 330.3, DENSE),
    ("NVIDIA B200", "fp32", 600 / 8, DENSE),
    ("NVIDIA B200", "tf32", 18_000 / 8, SPARSE),
    ("NVIDIA B200", "bf16", 36_000 / 8, SPARSE),
    ("NVIDIA B200", "fp8", 72_000 / 8, SPARSE),
]


@pytest.mark.parametrize("name, precision, printed, divided", DATASHEETS)
def test_each_peak_is_its_datasheets_dense_figure(name, precision, printed, divided):
    value, why = peaks.peak(name, precision)
    assert why is None
    assert value == pytest.approx(printed / divided * 1e12, rel=1e-3)


def test_each_row_names_its_source_and_the_datasheets_cover_every_row():
    assert all(row.source for row in peaks.TABLE)
    tested = {peaks.find(name).model for name, *_ in DATASHEETS}
    assert tested == {row.model for row in peaks.TABLE}


def test_a_gpu_is_known_by_its_whole_name_never_a_part():
    assert peaks.find("NVIDIA H100 NVL").model == "H100 NVL"  # not the SXM's 989
    assert peaks.find("NVIDIA H100 80GB HBM3").model == "H100 SXM"
    assert peaks.find("NVIDIA H100") is None  # which H100 is it? n/a, not a guess
    value, why = peaks.peak("NVIDIA H800", "bf16")
    assert value is None and "not in the table" in why


def test_no_peak_for_the_cpu_a_mig_slice_or_a_precision_the_gpu_lacks():
    assert peaks.peak(None, "fp32") == (None, "the CPU has no peak in the table")
    value, why = peaks.peak("NVIDIA H100 80GB HBM3 MIG 1g.10gb", "bf16")
    assert value is None and "MIG slice" in why
    value, why = peaks.peak("NVIDIA A100-SXM4-80GB", "fp8")
    assert value is None and "no fp8 peak" in why


def test_an_fp32_job_with_tf32_on_gets_the_tf32_peak():
    from mgpu_tui.engine.rank.watch.flops import precision_name

    assert (
        peaks.peak("NVIDIA H100 80GB HBM3", precision_name("torch.float32", "cuda", tf32=True))[0] == 494.5e12
    )
    assert (
        peaks.peak("NVIDIA H100 80GB HBM3", precision_name("torch.float32", "cuda", tf32=False))[0] == 67e12
    )
