"""The pure function from spec to (argv, env): tested exactly as it runs, starting nothing."""

from pathlib import Path

import pytest

from mgpu_tui.engine.launch.command import build_command
from mgpu_tui.engine.launch.spec import LaunchSpec, resolve
from mgpu_tui.engine.machine.host import Host
from mgpu_tui.engine.protocol.rundir import RunDir

CPU_HOST = Host(cpu_count=8, gpu_count=0, gpu_note="no NVIDIA GPU", torch_available=True)
GPU_HOST = Host(cpu_count=64, gpu_count=8, gpu_note="8 GPU(s)", torch_available=True)
RUN = RunDir(Path("/runs/r1"))


def build(spec, host=CPU_HOST, env=None, cpus=8):
    return build_command(
        resolve(spec, host),
        RUN,
        "abc",
        python="/py",
        cpu_count=cpus,
        base_env=env if env is not None else {"PATH": "/bin"},
    )


def test_multi_process_mode_goes_through_torchrun_with_per_rank_files():
    launch = build(LaunchSpec("ddp", nproc=2, steps=30, batch_size=64, device="cpu"))
    assert launch.argv == (
        "/py",
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
        "--log-dir",
        "/runs/r1/logs",
        "--redirects",
        "3",
        "-m",
        "mgpu_tui.demos.ddp",
        "--steps",
        "30",
        "--batch-size",
        "64",
        "--device",
        "cpu",
        "--width",
        "256",
        "--depth",
        "4",
        "--accum",
        "1",
    )


def test_single_process_mode_is_plain_python_with_its_error_file_set():
    launch = build(LaunchSpec("single", steps=5, device="cpu"))
    assert launch.argv[:3] == ("/py", "-m", "mgpu_tui.demos.single")
    assert "torch.distributed.run" not in launch.argv
    assert launch.env["TORCHELASTIC_ERROR_FILE"] == "/runs/r1/logs/python/attempt_0/0/error.json"


def test_environment_names_the_run_and_drops_stray_torchrun_defaults():
    env = {"PATH": "/bin", "PET_NPROC_PER_NODE": "7", "PET_MASTER_PORT": "1", "HOME": "/h"}
    launch = build(LaunchSpec("ddp", nproc=2, device="cpu"), env=env)
    assert not any(k.startswith("PET_") for k in launch.env)
    assert launch.env_changes["PET_NPROC_PER_NODE"] is None
    assert launch.env["MGPU_RUN_DIR"] == "/runs/r1"
    assert launch.env["MGPU_RUN_ID"] == "abc"
    assert launch.env["HOME"] == "/h" and launch.env["PYTHONUNBUFFERED"] == "1"
    assert env["PET_MASTER_PORT"] == "1"  # the caller's mapping is left alone


@pytest.mark.parametrize("cpus, nproc, expected", [(8, 2, "4"), (2, 2, "1"), (1, 4, "1"), (64, 8, "8")])
def test_omp_threads_share_the_cores_out(cpus, nproc, expected):
    launch = build(LaunchSpec("ddp", nproc=nproc, device="cpu", batch_size=64), cpus=cpus)
    assert launch.env["OMP_NUM_THREADS"] == expected


def test_user_set_omp_threads_is_kept():
    launch = build(LaunchSpec("ddp", nproc=2, device="cpu"), env={"OMP_NUM_THREADS": "3"})
    assert launch.env["OMP_NUM_THREADS"] == "3"
    assert "OMP_NUM_THREADS" not in launch.env_changes


def test_auto_device_picks_cuda_with_nccl_on_a_gpu_box_and_one_rank_per_gpu():
    resolved = resolve(LaunchSpec("ddp"), GPU_HOST)
    assert (resolved.device, resolved.backend, resolved.spec.nproc) == ("cuda", "nccl", 8)
    launch = build(LaunchSpec("ddp"), host=GPU_HOST)
    assert launch.argv[launch.argv.index("--device") + 1] == "cuda"


def test_auto_device_on_the_cpu_is_gloo_with_two_ranks():
    resolved = resolve(LaunchSpec("ddp"), CPU_HOST)
    assert (resolved.device, resolved.backend, resolved.spec.nproc) == ("cpu", "gloo", 2)
    assert resolve(LaunchSpec("single"), CPU_HOST).world_size == 1


def test_mode_options_reach_only_their_mode_and_verify_saves_parameters():
    pipeline = build(LaunchSpec("pipeline", nproc=2, device="cpu", microbatches=8, verify=True))
    assert pipeline.argv[-4:] == ("--microbatches", "8", "--save-params", "/runs/r1/params")
    mp = build(LaunchSpec("mp", device="cpu", stages=3, amp=True, accum=2))
    assert "--stages" in mp.argv and "--microbatches" not in mp.argv and "--amp" in mp.argv
    assert mp.argv[mp.argv.index("--accum") + 1] == "2"


def test_demo_arguments_pass_through_last():
    launch = build(LaunchSpec("single", device="cpu", demo_args=("--lr", "0.1", "--amp")))
    assert launch.argv[-3:] == ("--lr", "0.1", "--amp")


def test_shared_gpus_reach_the_demo_and_rpc_amp_is_bf16_on_cuda():
    one_gpu = Host(cpu_count=16, gpu_count=1, gpu_note="1 GPU(s)", torch_available=True)
    launch = build(LaunchSpec("ddp", nproc=2, device="cuda", share_gpus=True), host=one_gpu)
    assert "--share-gpus" in launch.argv
    assert "--share-gpus" not in build(LaunchSpec("ddp", nproc=2, device="cuda"), host=GPU_HOST).argv
    # rpc cannot train fp16 (no GradScaler under distributed autograd): its baseline must be bf16 too.
    rpc = build(LaunchSpec("rpc", nproc=2, device="cuda", amp=True), host=GPU_HOST).argv
    assert rpc[rpc.index("--amp-dtype") + 1] == "bf16"
    assert "--amp-dtype" not in build(LaunchSpec("rpc", nproc=2, device="cpu", amp=True)).argv


def test_a_run_on_nccl_keeps_nccls_own_account_in_its_run_directory():
    launch = build(LaunchSpec("ddp", nproc=2, device="cuda"), host=GPU_HOST)
    assert launch.env["NCCL_DEBUG"] == "INFO" and launch.env["NCCL_DEBUG_SUBSYS"] == "INIT,GRAPH,ENV"
    assert launch.env["NCCL_DEBUG_FILE"] == "/runs/r1/nccl-%h.%p.log"  # NCCL puts in host and pid
    # The user's own choice wins, and gloo runs get nothing of it.
    mine = build(
        LaunchSpec("ddp", nproc=2, device="cuda"), host=GPU_HOST, env={"PATH": "/bin", "NCCL_DEBUG": "WARN"}
    )
    assert mine.env["NCCL_DEBUG"] == "WARN" and "NCCL_DEBUG_FILE" not in mine.env
    assert "NCCL_DEBUG" not in build(LaunchSpec("ddp", nproc=2, device="cpu")).env
