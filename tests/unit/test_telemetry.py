"""The sampler: GPUs through NVML (a stand-in here), the host, and a real run's rank processes."""

import os
import time

import pynvml
import pytest
from waiting import wait_until

from conftest import TOPOLOGIES
from mgpu_tui.engine.machine import nvml
from mgpu_tui.engine.machine.telemetry import Sampler
from mgpu_tui.engine.machine.topology import parse_topo_text
from nvml_standin import FakeMachine, machine_from_topology, standin

H100 = TOPOLOGIES / "h100-sxm-8x-nvswitch.txt"


@pytest.fixture
def h100_box():
    machine = machine_from_topology(
        parse_topo_text(H100.read_text()), "NVIDIA H100 80GB HBM3", 80, nvlink_rate=100 << 30
    )
    nvml.use_library(standin(machine))
    yield machine
    nvml.use_library(None)


def test_every_gpu_is_sampled_with_its_fields(h100_box):
    h100_box.gpus[2].memory_used, h100_box.gpus[2].util = 40 << 30, 80
    h100_box.gpus[2].processes = [(4242, 39 << 30)]
    snap = Sampler().sample()
    assert snap.nvml.ok and len(snap.gpus) == 8
    gpu = snap.gpus[2].readings
    assert (gpu.memory_used, gpu.memory_total, gpu.util_gpu) == (40 << 30, 80 << 30, 80)
    assert gpu.power_w == pytest.approx(470.0) and gpu.power_limit_w == pytest.approx(700.0)
    assert gpu.processes == ((4242, 39 << 30),)
    assert snap.host.memory_total > 0


def test_host_cpu_use_is_a_figure_only_over_a_window_long_enough_to_measure():
    sampler = Sampler()
    first = sampler.sample().host.cpu_percent  # a few microseconds since the sampler began
    assert first == (None,) * os.cpu_count()
    time.sleep(0.3)
    cpu = sampler.sample().host.cpu_percent
    assert len(cpu) == os.cpu_count() and all(0.0 <= c <= 100.0 for c in cpu)
    assert sampler.sample().host.cpu_percent == first  # and again: too soon after the last one


def test_unsupported_fields_are_none_and_the_rest_still_reads(h100_box):
    h100_box.gpus[0].unsupported = {"nvmlDeviceGetPowerUsage", "nvmlDeviceGetTemperature"}
    readings = Sampler().sample().gpus[0].readings
    assert readings.power_w is None and readings.temperature_c is None
    assert readings.memory_total == 80 << 30


def test_nvlink_rates_come_from_cumulative_counters(h100_box):
    sampler = Sampler(interval=0.1)
    first = sampler.sample()
    assert first.gpus[0].nvlink_tx_bps is None  # one reading is no rate
    time.sleep(0.3)
    second = sampler.sample()
    assert second.gpus[0].readings.nvlink_tx_bytes > first.gpus[0].readings.nvlink_tx_bytes
    assert second.gpus[0].nvlink_tx_bps == pytest.approx(100 << 30, rel=0.15)


def test_a_lost_gpu_is_marked_lost_and_the_others_go_on(h100_box):
    sampler = Sampler()
    sampler.sample()
    h100_box.gpus[5].lost = True
    snap = sampler.sample()
    assert snap.gpus[5].lost and snap.gpus[5].readings is None
    assert snap.gpus[5].uuid == h100_box.gpus[5].uuid
    assert not snap.gpus[4].lost and snap.gpus[4].readings is not None


def test_no_driver_still_samples_the_host():
    nvml.use_library(standin(FakeMachine([], {}, init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED)))
    try:
        snap = Sampler().sample()
    finally:
        nvml.use_library(None)
    assert snap.gpus == () and snap.nvml.state is nvml.NvmlState.DRIVER_NOT_LOADED
    assert snap.host.memory_total > 0


def test_the_thread_books_samples_and_keeps_a_bounded_history(h100_box):
    sampler = Sampler(interval=0.1, history=3)
    seen = []
    sampler.start(on_sample=seen.append)
    assert wait_until(lambda: len(seen) >= 4)
    sampler.stop()
    assert len(seen) >= 4 and len(sampler.history()) == 3
    assert sampler.latest() is seen[-1]
    with pytest.raises(ValueError):
        Sampler(interval=0.05)


def test_pcie_rates_are_read_one_gpu_per_sample_in_turn(h100_box):
    # NVML blocks ~20 ms per PCIe call (the stand-in too): a sample reads them for one GPU only.
    calls = []
    assert nvml.status().ok
    real_call = nvml.lib().nvmlDeviceGetPcieThroughput

    def counting(handle, counter):
        calls.append(handle)
        return real_call(handle, counter)

    nvml.lib().nvmlDeviceGetPcieThroughput = counting
    sampler = Sampler()
    first = sampler.sample()
    assert calls == [0, 0]  # tx and rx of GPU 0
    assert first.gpus[0].pcie_age_s == 0 and first.gpus[0].readings.pcie_tx_bps == 1000 * 1024
    assert first.gpus[1].pcie_age_s is None and first.gpus[1].readings.pcie_tx_bps is None  # not yet read
    for _ in range(7):
        last = sampler.sample()
    assert sorted(set(calls)) == list(range(8)) and len(calls) == 16
    assert all(g.pcie_age_s is not None for g in last.gpus)
    assert last.gpus[0].readings.pcie_tx_bps == 1000 * 1024  # kept from its turn
    assert last.gpus[0].pcie_age_s > 0 and last.gpus[7].pcie_age_s == 0


def test_a_machine_is_busy_when_others_use_half_a_core_and_a_quarter_of_the_cores():
    from mgpu_tui.engine.run.figures.telemetry_log import TelemetryFigures

    def figures(others, cores):
        return TelemetryFigures(10, 1.0, 50.0, 1 << 30, cores=cores, others_cpu_cores=others)

    assert figures(None, 2).busy is None and figures(1.0, None).busy is None  # not measured: not said
    assert figures(0.4, 2).busy is None  # mgpu-tui's own processes and a shell: not busy
    assert figures(0.5, 2).busy.startswith("other processes used 0.5 of the 2 cores")
    assert figures(1.5, 8).busy is None and figures(2.0, 8).busy is not None  # a quarter of 8
