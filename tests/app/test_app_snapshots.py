"""Snapshots of views with deterministic inputs beyond test_view_snapshots.py's matrix: a PCIe box with NICs.

Update after an intended change of the views with `pytest tests/app/test_app_snapshots.py --snapshot-update`.
"""

from conftest import TOPOLOGIES
from mgpu_tui.app import create_app
from mgpu_tui.engine.machine.host import Host
from mgpu_tui.engine.machine.topology import parse_topo_text

FIXTURES = TOPOLOGIES
HOST = Host(cpu_count=192, gpu_count=8, gpu_note="8 GPU(s), driver 550.54.15", torch_available=True)


def test_topology_of_the_pcie_box_with_nics(snap_compare):
    topology = parse_topo_text((FIXTURES / "rtx4090-8x-pcie-2nic.txt").read_text())
    app = create_app(telemetry=[], topology=topology, host=HOST)
    assert snap_compare(app, press=["t"], terminal_size=(160, 50))
