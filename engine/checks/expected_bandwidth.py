"""What the links should give an all_reduce, and how the measured figure compares.

nccl-tests' busbw of an all_reduce approaches the per-GPU, one-direction bandwidth of the link
the ring runs over (nccl-tests' PERFORMANCE.md defines busbw so that it does), and NCCL reaches
about 80% of the line rate in practice. So:

- every pair of the job's GPUs on NVLink (NVSwitch, or direct links): links x per-link rate;
- else PCIe: lanes x per-lane rate of the slowest GPU's slot (a ring is as fast as its slowest hop);

times 0.8, the expected busbw. Rates per direction (vendor figures): NVLink 1 (P100) 20 GB/s a
link, NVLink 2-4 (V100, A100, H100) 25 GB/s, NVLink 5 (B200) 50 GB/s; PCIe Gen 3 0.985 GB/s a
lane, Gen 4 1.969, Gen 5 3.938, Gen 6 7.563. A measured busbw at or above half the expected
figure passes, down to a fifth warns, below that fails. On the CPU nothing is graded.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from mgpu_tui.engine.checks.results import CheckResult, Status
from mgpu_tui.engine.machine.nvml import LinkFacts

NVLINK_GBPS = {1: 20.0, 2: 25.0, 3: 25.0, 4: 25.0, 5: 50.0}  # a link, one direction, by NVML's version
PCIE_LANE_GBPS = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}  # a lane, one direction
EFFICIENCY = 0.8  # of the line rate, what NCCL's all_reduce reaches in practice
PASS_AT, WARN_AT = 0.5, 0.2  # of the expected busbw


@dataclass(frozen=True)
class Expectation:
    busbw_GBps: float  # noqa: N815 (the unit is in the name, as in the report's JSON)
    source: str  # where the figure comes from, for a person

    def to_json(self) -> dict:
        return {"expected_busbw_GBps": round(self.busbw_GBps, 2), "expected_from": self.source}


def expected_busbw(facts: list[LinkFacts], all_nvlink: bool) -> Expectation | None:
    """The busbw the GPUs of a job should reach; None where NVML cannot tell the links' rates."""
    if not facts:
        return None
    nvlinks = [
        (f.nvlink_links, f.nvlink_version)
        for f in facts
        if f.nvlink_version in NVLINK_GBPS and f.nvlink_links
    ]
    if all_nvlink and len(nvlinks) == len(facts):
        links, version = min(nvlinks, key=lambda lv: lv[0] * NVLINK_GBPS[lv[1]])
        rate = NVLINK_GBPS[version]
        line = links * rate
        return Expectation(
            line * EFFICIENCY,
            f"{links} NVLink {version} links "
            f"x {rate:g} GB/s a direction = {line:g} GB/s, at "
            f"{EFFICIENCY:.0%}",
        )
    slots = [(f.pcie_width, f.pcie_gen) for f in facts if f.pcie_gen in PCIE_LANE_GBPS and f.pcie_width]
    if len(slots) == len(facts):
        width, gen = min(slots, key=lambda wg: wg[0] * PCIE_LANE_GBPS[wg[1]])
        line = width * PCIE_LANE_GBPS[gen]
        return Expectation(
            line * EFFICIENCY,
            f"PCIe Gen {gen} x{width} = {line:.1f} GB/s a direction, at {EFFICIENCY:.0%}",
        )
    return None


def grade(measured_GBps: float, expected: Expectation) -> tuple[str, str]:  # noqa: N803
    """("pass" | "warn" | "fail", a sentence) for a measured busbw against the expected one."""
    share = measured_GBps / expected.busbw_GBps
    verdict = "pass" if share >= PASS_AT else "warn" if share >= WARN_AT else "fail"
    sentence = (
        f"{share:.0%} of the {expected.busbw_GBps:.0f} GB/s these links should give ({expected.source})"
    )
    if verdict != "pass":
        sentence += (
            "; check that NCCL uses the links (mgpu-tui nccl on an NCCL_DEBUG=INFO log), that no "
            "other job shares the GPUs, and the GPUs' PCIe slots"
        )
    return verdict, sentence


def expectation_for_gpus(count: int) -> tuple[Expectation | None, str]:
    """The expected busbw of a job on the first ``count`` GPUs (NVML's order, as CUDA's without
    CUDA_VISIBLE_DEVICES), or None with the reason it cannot be known."""
    from mgpu_tui.engine.machine import nvml

    if not nvml.status().ok:
        return None, f"no NVML ({nvml.status().detail})"
    try:
        facts = [nvml.link_facts(i) for i in range(count)]
        all_nvlink = all(nvml.p2p(i, j)["nvlink"] for i in range(count) for j in range(i + 1, count))
    except (nvml.GpuLost, nvml.NvmlCallFailed) as exc:
        return None, f"NVML could not tell the links ({exc})"
    expected = expected_busbw(facts, all_nvlink)
    return (expected, "") if expected else (None, "NVML does not tell these links' rates")


def graded(result: CheckResult, expected: Expectation | None, why_not: str) -> CheckResult:
    """The bandwidth check's result, graded against the expected busbw when there is one."""
    measured = result.metrics.get("busbw_GBps")
    if result.status is not Status.PASS or not isinstance(measured, (int, float)):
        return result
    if expected is None:
        metrics = {**result.metrics, "expected_busbw_GBps": None, "expected_from": None}
        return replace(result, detail=f"{result.detail}; not graded: {why_not}", metrics=metrics)
    verdict, sentence = grade(measured, expected)
    return replace(
        result,
        status=Status(verdict),
        detail=f"{result.detail}: {sentence}",
        metrics={**result.metrics, **expected.to_json()},
    )
