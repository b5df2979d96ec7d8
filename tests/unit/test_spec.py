"""Validation of a launch request: each refusal is one sentence, of the right kind."""

import pytest

from mgpu_tui.engine.launch.errors import EnvironmentUnusable, SpecError
from mgpu_tui.engine.launch.spec import LaunchSpec, resolve
from mgpu_tui.engine.machine.host import Host, visible_gpu_count

CPU = Host(cpu_count=2, gpu_count=0, gpu_note="no NVIDIA GPU: no driver", torch_available=True)
TWO_GPUS = Host(cpu_count=16, gpu_count=2, gpu_note="2 GPU(s)", torch_available=True)


@pytest.mark.parametrize(
    "spec, host, words",
    [
        (LaunchSpec("no-such-mode"), CPU, "unknown mode 'no-such-mode'"),
        (LaunchSpec("ddp", nproc=0), CPU, "--nproc must be at least 1, got 0"),
        (LaunchSpec("ddp", nproc=-1), CPU, "--nproc must be at least 1, got -1"),
        (LaunchSpec("ddp", steps=0), CPU, "--steps must be at least 1"),
        (LaunchSpec("ddp", batch_size=0), CPU, "--batch-size must be at least 1"),
        (LaunchSpec("ddp", device="tpu"), CPU, "--device must be one of"),
        (LaunchSpec("ddp", device="cuda"), CPU, "--device cuda needs an NVIDIA GPU"),
        (LaunchSpec("ddp", nproc=4, device="cuda"), TWO_GPUS, "needs 4 GPUs, but 2 are visible"),
        (LaunchSpec("ddp", nproc=3, batch_size=64), CPU, "does not split evenly over 3 ranks"),
        (LaunchSpec("single", nproc=2), CPU, "runs as one process"),
        (LaunchSpec("ddp_mp", nproc=2, device="cuda"), TWO_GPUS, "needs 4 GPUs, but 2 are visible"),
        (LaunchSpec("mp", stages=3, device="cuda"), TWO_GPUS, "needs 3 GPUs, but 2 are visible"),
        (LaunchSpec("rpc", nproc=1), CPU, "needs at least 2 ranks"),
        (LaunchSpec("pipeline", nproc=2, batch_size=64, microbatches=5), CPU, "equal micro-batches"),
        (LaunchSpec("pipeline", nproc=6, depth=4), CPU, "6 stages is more than the model's 5 layers"),
        (LaunchSpec("ddp", accum=0), CPU, "--accum must be at least 1"),
        (LaunchSpec("ddp", nproc=2, share_gpus=True), CPU, "--share-gpus is for CUDA ranks"),
        (
            LaunchSpec("script", script=__file__, device="cuda", share_gpus=True),
            TWO_GPUS,
            "--share-gpus is for the modes",
        ),
    ],
)
def test_bad_requests_are_usage_errors_with_one_sentence(spec, host, words):
    with pytest.raises(SpecError) as info:
        resolve(spec, host)
    message = str(info.value)
    assert words in message
    assert "\n" not in message and message.endswith(".")


def test_missing_torch_makes_the_environment_unusable():
    no_torch = Host(cpu_count=2, gpu_count=0, gpu_note="", torch_available=False)
    with pytest.raises(EnvironmentUnusable, match="torch is not installed"):
        resolve(LaunchSpec("ddp"), no_torch)


def test_cuda_with_enough_gpus_resolves():
    resolved = resolve(LaunchSpec("ddp", nproc=2, device="cuda"), TWO_GPUS)
    assert (resolved.device, resolved.backend, resolved.world_size) == ("cuda", "nccl", 2)


@pytest.mark.parametrize(
    "physical, visible, expected",
    [
        (8, None, 8),
        (8, "", 0),
        (8, "-1", 0),
        (8, "0,1", 2),
        (8, "0,-1,1", 1),
        (2, "0,1,2,3", 2),
        (4, "GPU-1a2b,GPU-3c4d", 2),
        (4, "3,9", 1),
        (0, "0", 0),
    ],
)
def test_visible_gpus_follow_cuda_visible_devices(physical, visible, expected):
    assert visible_gpu_count(physical, visible) == expected


ONE_GPU = Host(cpu_count=16, gpu_count=1, gpu_note="1 GPU(s)", torch_available=True)


@pytest.mark.parametrize("mode, nproc", [("ddp", 2), ("fsdp", 4), ("ddp_mp", 1), ("rpc", 2), ("mp", None)])
def test_shared_gpus_run_over_gloo_and_say_so(mode, nproc):
    with pytest.raises(SpecError, match="--share-gpus lets ranks share them"):
        resolve(LaunchSpec(mode, nproc=nproc, device="cuda"), ONE_GPU)
    resolved = resolve(LaunchSpec(mode, nproc=nproc, device="cuda", share_gpus=True), ONE_GPU)
    assert resolved.shared_gpus and resolved.backend == "gloo"  # NCCL refuses two ranks on one GPU
    assert resolved.to_json()["shared_gpus"] is True


def test_share_gpus_with_enough_gpus_changes_nothing():
    resolved = resolve(LaunchSpec("ddp", nproc=2, device="cuda", share_gpus=True), TWO_GPUS)
    assert not resolved.shared_gpus and resolved.backend == "nccl"


def test_a_programs_arguments_are_bounded_where_they_are_written():
    """Over a megabyte of a script's arguments made a spec.json its own reader refused (the run was
    listed as broken, could not be opened or deleted): refused before anything starts."""
    from mgpu_tui.engine.launch.errors import SpecError
    from mgpu_tui.engine.launch.spec import MAX_PROGRAM_ARGS_BYTES, LaunchSpec, resolve

    big = ("x" * 1000,) * (MAX_PROGRAM_ARGS_BYTES // 1000 + 1)
    command = LaunchSpec(mode="exec", command=("python", *big))
    script = LaunchSpec(mode="script", script=__file__, demo_args=big)
    for spec in (command, script):
        with pytest.raises(SpecError, match="the program's arguments are .* bytes; at most 262,144"):
            resolve(spec, CPU)
