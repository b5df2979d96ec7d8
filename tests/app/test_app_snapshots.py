"""Snapshots of views with deterministic inputs: recorded telemetry of an 8-GPU box, a fixture topology.

Update after an intended change of the views with `pytest tests/test_app_snapshots.py --snapshot-update`.
"""

import dataclasses

import pytest

from conftest import TOPOLOGIES
from mgpu_tui.app import create_app
from mgpu_tui.engine.machine import nvml
from mgpu_tui.engine.machine.host import Host
from mgpu_tui.engine.machine.telemetry import HostSample, RankProcess, Sampler
from mgpu_tui.engine.machine.topology import parse_topo_text
from nvml_standin import machine_from_topology, standin

FIXTURES = TOPOLOGIES
HOST = Host(cpu_count=192, gpu_count=8, gpu_note="8 GPU(s), driver 550.54.15", torch_available=True)


@pytest.fixture
def recorded_h100_telemetry():
    """Telemetry of an HGX H100 box (the stand-in), with every moving figure pinned."""
    topology = parse_topo_text((FIXTURES / "h100-sxm-8x-nvswitch.txt").read_text())
    machine = machine_from_topology(topology, "NVIDIA H100 80GB HBM3", 80)
    for i, gpu in enumerate(machine.gpus):
        gpu.memory_used, gpu.util = (10 + 8 * i) << 30, 10 * (i + 2)
        gpu.processes = [(1000 + i, (9 + 8 * i) << 30)]
    nvml.use_library(standin(machine))
    try:
        sampler = Sampler()  # PCIe rates are read one GPU per sample: 8 samples read them all
        snapshots = [sampler.sample() for _ in range(8)][-3:]
    finally:
        nvml.use_library(None)
    host = HostSample(cpu_percent=(50.0,) * 16, memory_used=500 << 30, memory_total=2048 << 30,
                      load_avg=(12.0, 11.5, 10.0))
    ranks = tuple(RankProcess(r, 1000 + r, True, 99.0, 3 << 30, 12, machine.gpus[r].uuid) for r in range(8))
    pinned = []
    for snap in snapshots:
        gpus = tuple(dataclasses.replace(g, nvlink_tx_bps=float(20 << 30), nvlink_rx_bps=float(19 << 30))
                     for g in snap.gpus)  # fmt: skip
        pinned.append(dataclasses.replace(snap, t=0.0, gpus=gpus, host=host, ranks=ranks))
    return pinned, topology


def test_dashboard_of_an_8_gpu_box(snap_compare, recorded_h100_telemetry):
    snapshots, topology = recorded_h100_telemetry
    app = create_app(telemetry=snapshots, topology=topology, host=HOST)
    assert snap_compare(app, terminal_size=(160, 50))


def test_topology_of_the_pcie_box_with_nics(snap_compare):
    topology = parse_topo_text((FIXTURES / "rtx4090-8x-pcie-2nic.txt").read_text())
    app = create_app(telemetry=[], topology=topology, host=HOST)
    assert snap_compare(app, press=["t"], terminal_size=(160, 50))
