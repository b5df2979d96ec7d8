"""Level 1 of --check: each environment check, handed readings of this and other machines.

No process starts here: the torch probe's answer is given (what `python -m
mgpu_tui.engine.rank.torch_probe` prints for a CPU build of torch 2.13), and NVML is
the stand-in or a driver that fails every call.
"""

from dataclasses import replace

import pytest

from conftest import TOPOLOGIES
from mgpu_tui.engine.checks import environment as env_checks
from mgpu_tui.engine.checks.results import Status
from mgpu_tui.engine.machine import nvml
from mgpu_tui.engine.machine.topology import parse_topo_text
from nvml_standin import machine_from_topology, standin

FIXTURES = TOPOLOGIES
CPU_TORCH = {
    "torch": "2.13.0+cpu",
    "cuda": None,
    "cuda_available": False,
    "device_count": 0,
    "nccl": None,
    "distributed": True,
    "backends": {"gloo": True, "nccl": False, "mpi": False},
    "python": "3.11.7",
}


@pytest.fixture
def here():
    """This machine as level 1 reads it, with the torch probe's answer given (no child started)."""
    return env_checks.gather(torch_info=CPU_TORCH)


@pytest.fixture(autouse=True)
def no_standin_left():
    yield
    nvml.use_library(None)


def statuses(env, require_gpus=0):
    return {r.name: r for r in env_checks.level_one(env, require_gpus)}


@pytest.mark.parametrize(
    "environ, name, status, words",
    [
        ({"OMP_NUM_THREADS": "lots"}, "omp_num_threads", Status.FAIL, "must be a whole number"),
        ({"OMP_NUM_THREADS": "0"}, "omp_num_threads", Status.FAIL, "got '0'"),
        ({"OMP_NUM_THREADS": "512"}, "omp_num_threads", Status.WARN, "more than the"),
        ({"OMP_NUM_THREADS": "1"}, "omp_num_threads", Status.PASS, "OMP_NUM_THREADS=1"),
        ({"PET_NPROC_PER_NODE": "8"}, "env_vars", Status.WARN, "PET_NPROC_PER_NODE=8"),
        ({"NCCL_DEBUG": "INFO", "TORCH_CPP_LOG_LEVEL": "INFO"}, "env_vars", Status.PASS, "NCCL_DEBUG=INFO"),
    ],
)
def test_variables_set_wrong(here, environ, name, status, words):
    result = statuses(replace(here, environ=environ))[name]
    assert result.status is status and words in result.detail, result


def test_small_shm_low_file_limit_and_the_deprecated_pynvml_warn(here):
    results = statuses(
        replace(here, shm_bytes=64 * 2**20, open_files=(1024, 4096), pynvml_distribution="11.5.0")
    )
    assert results["shm"].status is Status.WARN and "64 MiB" in results["shm"].detail
    assert results["open_files"].status is Status.WARN and "ulimit -n 4096" in results["open_files"].detail
    package = results["pynvml_package"]
    assert package.status is Status.WARN and "pip uninstall pynvml" in package.detail


def test_a_missing_backend_fails(here):
    torch = {**here.torch, "backends": {"gloo": False, "nccl": False, "mpi": False}}
    result = statuses(replace(here, torch=torch))["backends"]
    assert result.status is Status.FAIL and "gloo is missing" in result.detail


def test_nvml_mismatch_is_a_failure_with_its_diagnosis(here):
    import pynvml

    from nvml_standin import FakeMachine

    nvml.use_library(standin(FakeMachine([], {}, init_error=pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH)))
    result = statuses(replace(here, nvml=nvml.status()))["nvml"]
    assert result.status is Status.FAIL and "reboot or reload the driver" in result.detail


def test_an_8_gpu_nvswitch_box_with_a_cpu_torch(here):
    parsed = parse_topo_text((FIXTURES / "h100-sxm-8x-nvswitch.txt").read_text())
    nvml.use_library(standin(machine_from_topology(parsed, "NVIDIA H100 80GB HBM3", 80)))
    env = env_checks.gather(torch_info=CPU_TORCH)  # NVML through the stand-in; torch a CPU build
    results = statuses(env, require_gpus=8)
    assert results["nvml"].status is Status.PASS and results["nvml"].metrics["device_count"] == 8
    assert results["topology"].status is Status.PASS and "NVSwitch" in results["topology"].detail
    assert results["p2p"].status is Status.PASS
    # What such a machine really has wrong: torch cannot use its GPUs.
    assert results["cuda"].status is Status.FAIL and "CPU build" in results["cuda"].detail
    limited = statuses(replace(env, environ={"CUDA_VISIBLE_DEVICES": "0,1"}, visible_gpus=2), require_gpus=4)
    count = limited["gpu_count"]
    assert count.status is Status.FAIL and "CUDA_VISIBLE_DEVICES 0,1" in count.detail


def test_the_environment_check_fails_the_topology_by_name(broken_nvml):
    results = {r.name: r for r in env_checks.level_one(env_checks.gather(torch_info=CPU_TORCH))}
    assert results["nvml"].status.value == "pass"  # init and the count work
    assert results["topology"].status.value == "fail" and "Unknown Error" in results["topology"].detail
