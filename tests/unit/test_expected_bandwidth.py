"""The measured all_reduce busbw, graded against what the links should give (NVML's account of
them, here the stand-in of real boxes: tests/nvml_standin.py)."""

import pytest

from conftest import TOPOLOGIES
from mgpu_tui.engine.checks.expected_bandwidth import expectation_for_gpus, expected_busbw, graded
from mgpu_tui.engine.checks.results import CheckResult, Status
from mgpu_tui.engine.machine import nvml
from mgpu_tui.engine.machine.nvml import LinkFacts
from mgpu_tui.engine.machine.topology import parse_topo_text
from nvml_standin import machine_from_topology, standin


def measured(busbw: float) -> CheckResult:
    return CheckResult(
        "bandwidth:all_reduce",
        Status.PASS,
        f"busbw {busbw:.2f} GB/s",
        {"busbw_GBps": busbw, "algbw_GBps": busbw / 1.75},
    )


@pytest.fixture
def hgx_h100():
    topology = parse_topo_text((TOPOLOGIES / "h100-sxm-8x-nvswitch.txt").read_text())
    nvml.use_library(standin(machine_from_topology(topology, "NVIDIA H100 80GB HBM3", 80)))
    yield
    nvml.use_library(None)


@pytest.mark.parametrize("busbw,status", [(380.0, "pass"), (150.0, "warn"), (30.0, "fail")])
def test_an_8_gpu_nvswitch_box_is_graded_against_its_18_nvlink4_links(hgx_h100, busbw, status):
    expected, why_not = expectation_for_gpus(8)
    assert why_not == "" and expected.busbw_GBps == pytest.approx(18 * 25 * 0.8)  # 360 GB/s
    assert expected.source == "18 NVLink 4 links x 25 GB/s a direction = 450 GB/s, at 80%"
    result = graded(measured(busbw), expected, why_not)
    assert result.status.value == status
    assert result.metrics["expected_busbw_GBps"] == 360.0 and result.metrics["busbw_GBps"] == busbw
    assert f"{busbw / 360:.0%} of the 360 GB/s these links should give" in result.detail
    assert ("mgpu-tui nccl" in result.detail) == (status != "pass")


def test_a_pcie_box_is_graded_by_its_slowest_slot():
    facts = [LinkFacts(None, 0, 4, 16), LinkFacts(None, 0, 4, 8)]  # one GPU in an x8 slot
    expected = expected_busbw(facts, all_nvlink=False)
    assert expected.busbw_GBps == pytest.approx(8 * 1.969 * 0.8) and "PCIe Gen 4 x8" in expected.source


def test_on_the_cpu_or_with_unknown_links_the_figure_is_shown_ungraded():
    result = graded(measured(2.5), None, "CPU ranks: no GPU link to grade it against")
    assert result.status is Status.PASS and result.metrics["expected_busbw_GBps"] is None
    assert result.detail.endswith("; not graded: CPU ranks: no GPU link to grade it against")
    assert expected_busbw([LinkFacts(None, 0, None, None)], all_nvlink=False) is None
