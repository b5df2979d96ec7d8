"""Topology from real `nvidia-smi topo -m` outputs, and from NVML (a stand-in built from those machines)."""

import json

import pytest

from conftest import TOPOLOGIES, cli_in_process
from mgpu_tui.engine.machine import nvml
from mgpu_tui.engine.machine.topology import TopologyParseError, describe, from_nvml, parse_topo_text, ranges
from nvml_standin import FakeMachine, machine_from_topology, nvlink_pairs_machine, standin

FIXTURES = TOPOLOGIES
EXPECTED = {
    # file: (GPUs, the one off-diagonal label, CPU affinity of GPU0 and GPU7 (or last), NUMA of first/last)
    "a100-sxm4-8x-nvswitch.txt": (8, "NV12", "0-23,48-71", "24-47,72-95", "0", "1"),
    "h100-sxm-8x-nvswitch.txt": (8, "NV18", "0-47,96-143", "48-95,144-191", "0", "1"),
    # Recorded on the lent H100: its header wrapped in terminal escapes (underline on, off).
    "h100-1x-vm.txt": (1, None, "0-15", "0-15", "0", "0"),
    "l40s-4x-pcie.txt": (4, "NODE", "0-47", "0-47", "0", "0"),
    "rtx4090-8x-pcie-2nic.txt": (8, "SYS", "0-55,112-167", "56-111,168-223", "0", "1"),
}


@pytest.fixture(autouse=True)
def no_standin_left():
    yield
    nvml.use_library(None)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fixture_parses_to_its_matrix_and_affinities(name):
    n, label, cpu_first, cpu_last, numa_first, numa_last = EXPECTED[name]
    topology = parse_topo_text((FIXTURES / name).read_text())
    assert len(topology.gpus) == n
    assert topology.matrix == tuple(tuple("X" if i == j else label for j in range(n)) for i in range(n))
    assert (topology.gpus[0].cpu_affinity, topology.gpus[-1].cpu_affinity) == (cpu_first, cpu_last)
    assert (topology.gpus[0].numa_affinity, topology.gpus[-1].numa_affinity) == (numa_first, numa_last)
    assert all(g.gpu_numa_id == "N/A" for g in topology.gpus)


def test_nics_with_a_legend_are_kept_apart_from_gpus():
    topology = parse_topo_text((FIXTURES / "rtx4090-8x-pcie-2nic.txt").read_text())
    assert topology.nics == ("NIC0", "NIC1")
    assert topology.nic_links["NIC0"] == ("SYS",) * 6 + ("PHB", "SYS")


def variant(name, edit):
    return parse_topo_text(edit((FIXTURES / name).read_text()))


def test_format_variations_give_the_same_topology():
    base = parse_topo_text((FIXTURES / "rtx4090-8x-pcie-2nic.txt").read_text())
    # NICs named after the device, with the legend dropped.
    named = variant(
        "rtx4090-8x-pcie-2nic.txt",
        lambda t: t.replace("NIC0", "mlx5_0").replace("NIC1", "mlx5_1").split("\n\n")[0],
    )
    assert named.matrix == base.matrix and named.nics == ("mlx5_0", "mlx5_1")
    assert named.nic_links["mlx5_0"] == base.nic_links["NIC0"]
    # Spaces instead of tabs, and no GPU NUMA ID column.
    spaced = variant("a100-sxm4-8x-nvswitch.txt", lambda t: t)

    def drop_numa_id(text):
        return "\n".join(
            line.replace("   GPU NUMA ID", "").replace("               N/A", "") for line in text.splitlines()
        )

    no_numa_id = variant("a100-sxm4-8x-nvswitch.txt", drop_numa_id)
    assert no_numa_id.matrix == spaced.matrix and no_numa_id.gpus[3].cpu_affinity == "0-23,48-71"
    assert no_numa_id.gpus[0].gpu_numa_id is None
    tabbed = variant(
        "l40s-4x-pcie.txt", lambda t: "\n".join("\t".join(line.split("    ")) for line in t.splitlines())
    )
    assert tabbed.matrix == parse_topo_text((FIXTURES / "l40s-4x-pcie.txt").read_text()).matrix


def test_empty_and_na_cells_are_na():
    text = "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\nGPU0\t X \t\t0-7\t0\nGPU1\tN/A\t X \t0-7\t0\n"
    topology = parse_topo_text(text)
    assert topology.matrix == (("X", "N/A"), ("N/A", "X"))


@pytest.mark.parametrize(
    "text", ["", "hello\nworld\n", "\tGPU1\tGPU0\nGPU1\t X \tSYS\n", "\tGPU0\tGPU1\nGPU0\t X \n"]
)
def test_text_that_is_not_a_matrix_is_refused(text):
    with pytest.raises(TopologyParseError):
        parse_topo_text(text)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_nvml_path_agrees_with_the_parsed_text(name):
    parsed = parse_topo_text((FIXTURES / name).read_text())
    nvml.use_library(standin(machine_from_topology(parsed, "NVIDIA H100 80GB HBM3", 80)))
    built = from_nvml()
    assert built.matrix == parsed.matrix
    for a, b in zip(built.gpus, parsed.gpus):
        assert (a.cpu_affinity, a.numa_affinity) == (b.cpu_affinity, b.numa_affinity)
        assert a.gpu_numa_id == b.gpu_numa_id
    assert built.nvswitch == parsed.nvswitch
    assert describe(built) == describe(parsed)


def test_nvlink_pairs_and_p2p_from_nvml():
    nvml.use_library(standin(nvlink_pairs_machine()))
    topology = from_nvml()
    assert topology.matrix[0] == ("X", "NV4", "SYS", "SYS") and topology.matrix[2][3] == "NV4"
    assert topology.nvswitch is False
    assert topology.p2p["nvlink"][0] == (None, True, False, False)
    assert describe(topology) == "GPU0-GPU1 are an NVLink pair (NV4); GPU0-GPU2 crosses the CPU socket (SYS)."


def test_no_driver_is_a_state_not_an_error():
    import pynvml

    nvml.use_library(standin(FakeMachine([], {}, init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)))
    assert from_nvml() is None
    assert nvml.status().state is nvml.NvmlState.LIBRARY_NOT_FOUND
    nvml.use_library(standin(FakeMachine([], {}, init_error=pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH)))
    assert nvml.status().state is nvml.NvmlState.MISMATCH


def test_affinity_ranges_are_written_like_nvidia_smi():
    assert ranges([0, 1, 2, 3, 8, 10, 11]) == "0-3,8,10-11"
    assert ranges([5]) == "5" and ranges(None) is None


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_topo_command_from_file_json(name, capsys):
    code, out, err = cli_in_process(capsys, "topo", "--from-file", str(FIXTURES / name), "--json")
    assert code == 0, err
    document = json.loads(out)
    n, label = EXPECTED[name][:2]
    assert document["matrix"][0][:2] == ["X", label][:n] and len(document["gpus"]) == n
    assert {"index", "name", "cpu_affinity", "numa_affinity"} <= document["gpus"][0].keys()
    assert document["reading"].endswith(".")


def test_topo_here_without_a_driver_exits_0_with_no_gpus(capsys):
    code, out, _ = cli_in_process(capsys, "topo", "--json")
    assert code == 0
    document = json.loads(out)
    assert document["gpus"] == [] and document["reason"]
    code, out, _ = cli_in_process(capsys, "topo")
    assert code == 0 and out.startswith("no NVIDIA GPU here")
    # then the host's own layout, as the app's Topology view shows it (issue #31), from sysfs
    from mgpu_tui.engine.machine.host_layout import read_layout

    assert "This host's own layout" in out and "logical CPU" in out
    for node in read_layout().nodes:
        assert f"NUMA node {node.node}: CPUs {node.cpus}" in out


def test_topo_of_a_bad_file_is_a_usage_error(tmp_path, capsys):
    (tmp_path / "x.txt").write_text("not a topology")
    for path in (tmp_path / "x.txt", tmp_path / "missing.txt"):
        code, _, err = cli_in_process(capsys, "topo", "--from-file", str(path))
        assert code == 2 and len(err.strip().splitlines()) == 1
