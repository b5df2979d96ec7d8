"""NCCL's own logs, read: the real logs of tests/fixtures/nccl (SOURCES.md gives each one's source
and the reading it should give) and the forms other launchers and versions give them."""

import random
from pathlib import Path

import pytest

from mgpu_tui.engine.machine.nccl_log import disagreements, read_nccl_log, transport_kind
from mgpu_tui.engine.machine.topology import parse_topo_text

FIXTURES = Path(__file__).parents[1] / "fixtures"


def read(name: str):
    return read_nccl_log((FIXTURES / "nccl" / name).read_text(errors="replace").splitlines())


def links(reading) -> dict:
    return {
        (link.host, link.src, link.dst): (link.kind, link.direction, link.channels) for link in reading.links
    }


def test_01_two_single_node_communicators_on_nvswitch_through_ray_prefixes():
    r = read("01-nvswitch-8xa100-azure-nd96asr-vllm-ray.log")
    assert r.versions == ["2.21.5+cuda12.4"]
    assert set(r.hosts) == {"deepseek-v2-5-0", "deepseek-v2-5-0-1"}  # the Ray-prefixed host too
    comms = {c.comm_id: c for c in r.communicators}
    a, b = comms["0xc13f651b1c793497"], comms["0xc9d8ed7b94ebce1c"]
    assert (a.host, a.comm, a.rank, a.nranks, a.nnodes, a.local_ranks, a.complete) == (
        "deepseek-v2-5-0",
        "0x4b8e2080",
        0,
        8,
        1,
        8,
        True,
    )
    assert (b.host, b.rank, b.nranks, b.bus_id, b.complete) == ("deepseek-v2-5-0-1", 1, 8, "200000", False)
    assert r.ring_channels == 24 and r.rings["deepseek-v2-5-0:5969"] == list(range(8))
    found = links(r)
    assert found[("deepseek-v2-5-0", 0, 1)] == ("P2P/IPC", None, list(range(24)))
    assert found[("deepseek-v2-5-0-1", 1, 2)] == ("P2P/IPC", None, list(range(23)))  # ch 23's line is cut
    assert r.channel_counts == {"coll": 24, "collnet": 24, "nvls": 0, "p2p": 32, "peer": 32}
    assert r.env["NCCL_CUMEM_ENABLE"] == "0" and r.init_complete == 1 and not r.errors
    assert r.summary() == (
        "8 ranks, logged on 2 hosts; 2 communicators; P2P/IPC between 0-1, 1-2; "
        "24 channels; NCCL 2.21.5; Init COMPLETE x1"
    )


def test_02_p2p_direct_pointer_in_one_process_then_a_cuda_stub_failure():
    r = read("02-p2p-direct-pointer-2x-rtx3090-single-process.log")
    assert r.versions == ["2.15.5+cuda11.8"] and r.hosts == {"ArchLinux": {"pids": [6482], "ranks": [0, 1]}}
    assert [(c.rank, c.bus_id, c.nnodes) for c in r.communicators] == [(0, "1000", None), (1, "9000", None)]
    assert links(r) == {
        ("ArchLinux", 0, 1): ("P2P/direct pointer", None, [0, 1, 2, 3]),
        ("ArchLinux", 1, 0): ("P2P/direct pointer", None, [0, 1, 2, 3]),
    }
    assert r.ring_channels == 4 and r.channel_counts == {"coll": 4, "p2p": 4, "peer": 4}
    (stub,) = r.warnings
    assert stub.message == "Cuda failure 'CUDA driver is a stub library'" and "stubs" in stub.meaning
    assert r.errors[0] == "Test NCCL failure all_reduce.cu:44 'unhandled cuda error / '"
    assert r.init_complete == 2


def test_03_shm_between_consumer_gpus_without_p2p():
    r = read("03-shm-2x-rtx5090-geforce-no-p2p.log")
    assert r.versions == ["2.25.1+cuda12.8"]
    comm_id = "0x726fb0d348b9154b"
    assert {(c.rank, c.comm, c.bus_id, c.comm_id) for c in r.communicators} == {
        (0, "0x639f4c724ac0", "21000", comm_id),
        (1, "0x639f4c7a4290", "61000", comm_id),
    }
    assert links(r) == {("GENOA-06", 0, 1): ("SHM", None, [0, 1]), ("GENOA-06", 1, 0): ("SHM", None, [0, 1])}
    assert r.ring_channels == 2 and r.init_complete == 2
    counts = {w.message: (w.count, w.benign) for w in r.warnings}
    assert counts["Could not find a path for pattern 4, falling back to simple order"] == (2, True)
    assert counts["Cuda failure 1 'invalid argument'"] == (1, False)
    assert r.summary().startswith(
        "2 ranks, logged on 1 host; SHM between 0-1; 2 channels; NCCL 2.25.1; "
        "Init COMPLETE x2; then: Test NCCL failure"
    )


def test_05_two_nodes_over_sockets_with_p2p_and_shm_inside_the_node():
    r = read("05-socket-2node-4gpu-pcie-tesla.log")
    assert r.versions == ["2.7.8+cuda10.1"] and list(r.hosts) == ["tesla-105"]
    assert sorted((c.rank, c.bus_id) for c in r.communicators) == [
        (0, "18000"),
        (1, "1a000"),
        (2, "af000"),
        (3, "b1000"),
    ]
    found = links(r)
    for pair in ((0, 1), (1, 0), (2, 3), (3, 2)):
        assert found[("tesla-105", *pair)] == ("P2P/IPC", None, [0, 1])
    assert found[("tesla-105", 1, 2)] == ("SHM", None, [0, 1])  # the pair that crosses CPU sockets
    assert found[("tesla-105", 3, 4)] == ("NET/Socket", "send", [0, 1])
    assert found[("tesla-105", 7, 0)] == ("NET/Socket", "receive", [0, 1])
    assert found[("tesla-105", 1, 4)] == ("NET/Socket", "send", [0])  # a tree link
    assert found[("tesla-105", 0, 5)] == ("NET/Socket", "send", [1])
    assert r.rings["tesla-105:1475"] == list(range(8)) and r.ring_channels == 2
    (ibverbs,) = r.warnings
    assert ibverbs.count == 4 and ibverbs.benign and "InfiniBand" in ibverbs.meaning
    assert r.init_complete == 4 and not r.errors
    assert r.summary() == (
        "8 ranks, logged on 1 host; NET/Socket between 0-5, 0-7, 1-4, 3-4; P2P/IPC "
        "between 0-1, 2-3; SHM between 1-2; 2 channels; NCCL 2.7.8; Init COMPLETE x4"
    )


def test_06_a_socket_connect_failure_as_an_internal_error():
    r = read("06-failure-socket-af-unix-internal-error.log")
    assert r.versions == ["2.29.2+cuda12.8"]
    (comm,) = r.communicators
    assert (comm.comm_id, comm.comm, comm.rank, comm.nranks, comm.bus_id, comm.nnodes, comm.local_ranks) == (
        "0x2ef13c5ed0553a05",
        "0x55eb22a04a50",
        0,
        2,
        "80",
        2,
        1,
    )  # NCCL's own count of nodes
    assert links(r) == {("VM-16-64-ubuntu", 0, 1): ("NET/Socket", "send", [1])}
    assert r.env["NCCL_P2P_DISABLE"] == "1" and r.env["NCCL_SHM_DISABLE"] == "1"
    (warn,) = r.warnings  # its line starts with a timestamp
    assert warn.source == "misc/socket.cc:537" and "neither IPv4 nor IPv6" in warn.meaning
    assert r.errors == [
        "NCCL error a.cu:46: internal error - please report this issue to the NCCL developers",
        "NCCL returned 3 (ncclInternalError) from transport/net_socket.cc:399",
    ]


@pytest.mark.parametrize(
    "via,kind",
    [
        ("P2P/CUMEM/read", "P2P/CUMEM"),
        ("P2P/IPC/read", "P2P/IPC"),
        ("P2P/direct pointer", "P2P/direct pointer"),
        ("SHM/direct/direct", "SHM"),
        ("direct shared memory", "SHM"),
        ("NET/IB/0/GDRDMA", "NET/IB with GDRDMA"),
        ("NET/IBext_v8/3", "NET/IB"),
        ("NET/Socket/0/Shared", "NET/Socket"),
        ("NET/AWS Libfabric/0", "NET/AWS Libfabric"),
        ("NVLS", "NVLS"),
        ("CollNet/direct", "CollNet"),
    ],
)
def test_every_transport_nccl_names_has_its_family(via, kind):
    assert transport_kind(via) == kind


def test_other_launchers_prefixes_and_interleaved_ranks_read_the_same():
    lines = (FIXTURES / "nccl" / "05-socket-2node-4gpu-pcie-tesla.log").read_text().splitlines()
    mpi = [f"[1,{i % 4}]<stdout>:{line}" for i, line in enumerate(lines)]  # Open MPI's --tag-output
    stamped = [f"2026-11-23T06:00:{i % 60:02d}Z {line}" for i, line in enumerate(lines)]
    shuffled = lines[:]
    random.Random(0).shuffle(shuffled)  # ranks' lines interleaved any way
    plain = read_nccl_log(lines)
    for variant in (mpi, stamped, shuffled):
        other = read_nccl_log(variant)
        assert links(other) == links(plain) and other.versions == plain.versions
        assert sorted((c.rank, c.bus_id) for c in other.communicators) == sorted(
            (c.rank, c.bus_id) for c in plain.communicators
        )


def test_cut_and_hostile_lines_never_raise_and_count_for_nothing():
    rng = random.Random(1)
    junk = [
        "",
        "NCCL INFO",
        "host:1:2 [0] NCCL INFO Channel 00/02 :",
        "x" * 1_000_000,
        "h:1:1 [0] NCCL INFO Channel 00 : 0[0] ->",
        "h:1:1 [0] NCCL INFO comm 0xzz rank -1 nRanks",
        "\x1b[31mNCCL version\x1b[0m",
        "h:1:1 [0] NCCL INFO Channel 99999999999999/1 : 1 2",
        "h:9:9 [0] NCCL INFO NCCL_X set by environment to",
        "a" * 300 + ":1:1 [0] NCCL INFO " + "y" * 10_000,
    ]
    junk += ["".join(chr(rng.randrange(32, 0x3000)) for _ in range(rng.randrange(200))) for _ in range(200)]
    r = read_nccl_log(junk)
    assert r.links == [] and r.communicators == [] and r.versions == []
    assert r.summary().startswith(("no NCCL lines", "0 ranks")) or r.ranks() is None


def test_a_pair_on_nvlink_that_nccl_joined_through_shared_memory_is_called_out():
    """The SHM log of 03 (consumer GPUs 0 and 1) read against an NVSwitch box's topology: on such a
    box SHM between them means P2P was turned off. (A pairing made for the test: the log is real, the
    box is not the one it came from.)"""
    topology = parse_topo_text((FIXTURES / "topology" / "h100-sxm-8x-nvswitch.txt").read_text())
    notes = disagreements(read("03-shm-2x-rtx5090-geforce-no-p2p.log"), topology)
    assert notes == [
        "GPU0-GPU1 share NV18 but NCCL used SHM: P2P is off: is NCCL_P2P_DISABLE set, or "
        "NCCL_P2P_LEVEL below NVL? (in a container, the GPUs may also be isolated from each "
        "other)"
    ]
    assert disagreements(read("02-p2p-direct-pointer-2x-rtx3090-single-process.log"), topology) == []


def test_a_runs_nccl_files_become_its_summarys_reading(tmp_path):
    from mgpu_tui.engine.protocol.rundir import RunDir
    from mgpu_tui.engine.run.nccl.nccl_record import nccl_figures

    assert nccl_figures(RunDir(tmp_path)) is None  # NCCL wrote nothing: nothing said
    log = (FIXTURES / "nccl" / "05-socket-2node-4gpu-pcie-tesla.log").read_text()
    (tmp_path / "nccl-tesla-105.1475.log").write_text(log)
    figures = nccl_figures(RunDir(tmp_path))
    assert figures is not None and figures.transports == ("NET/Socket", "P2P/IPC", "SHM")
    assert figures.versions == ("2.7.8+cuda10.1",) and figures.files == 1
    assert figures.summary == read("05-socket-2node-4gpu-pcie-tesla.log").summary()


@pytest.mark.parametrize(
    "name, code",
    [
        ("01-nvswitch-8xa100-azure-nd96asr-vllm-ray.log", 0),
        ("05-socket-2node-4gpu-pcie-tesla.log", 0),
        ("02-p2p-direct-pointer-2x-rtx3090-single-process.log", 1),  # nccl-tests' unhandled cuda error
        ("06-failure-socket-af-unix-internal-error.log", 1),  # ncclInternalError
    ],
)
def test_the_exit_code_says_whether_the_job_hit_an_nccl_error(name, code, capsys):
    """A CI can tell a failed NCCL job from its log by the exit code (docs/nccl.md)."""
    from mgpu_tui.cli import main

    assert main(["nccl", str(FIXTURES / "nccl" / name)]) == code
    out = capsys.readouterr().out
    assert ("Errors:" in out) == bool(code)
