"""Root causes with what they mean: the signatures that have no reproduction on a CPU, from the
error texts torch, NCCL and CUDA print (tests/integration/test_hints.py reproduces the others)."""

import pytest

from mgpu_tui.engine.run.causes.rootcause import WORK_DONE_ABORT, RootCause, hint_for

CAPTURED = [
    (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity "
        "of 79.19 GiB of which 10.56 MiB is free.",
        "--amp",
    ),
    (
        "RuntimeError: Expected all tensors to be on the same device, but found at least two devices, "
        "cuda:0 and cpu!",
        "LOCAL_RANK",
    ),
    (
        "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, invalid usage, "
        "NCCL version 2.21.5\nncclInvalidUsage: This usually reflects invalid usage of NCCL library."
        "\nLast error:\n"
        "Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1000",
        "its own device",
    ),
    (
        "RuntimeError: CUDA error: invalid device ordinal\n"
        "CUDA kernel errors might be asynchronously reported",
        "fewer GPUs than ranks",
    ),
    (
        "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer "
        "[127.0.0.1]:29500",
        "lost a peer",
    ),
    (
        "[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE) ran for "
        "600000 milliseconds before timing out.",
        "never joined",
    ),
    (
        "torch.distributed.DistNetworkError: The server socket has failed to listen on any local network "
        "address. port: 29500, useIpv6: 0, code: -98, name: EADDRINUSE, message: address already in use",
        "--master-port",
    ),
    ("AssertionError: Torch not compiled with CUDA enabled", "CPU build"),
    ("RuntimeError: Tensor on device cpu is not on the expected device meta!", "different devices"),
]


@pytest.mark.parametrize("text,words", CAPTURED)
def test_each_known_signature_gets_its_hint(text, words):
    cause = RootCause(1, 1, None, text.splitlines()[0], text)
    assert words in hint_for(cause)


def test_an_unknown_error_gets_no_hint_rather_than_a_guess():
    assert hint_for(RootCause(0, 1, None, "ValueError: my data is wrong", "Traceback ...")) is None


def test_an_abort_at_exit_is_a_teardown_crash_only_when_the_work_had_finished():
    abort = RootCause(
        1,
        -6,
        "SIGABRT",
        "killed by SIGABRT (last stderr line: terminate called without an active exception)",
        "terminate called without an active exception",
    )
    assert hint_for(abort, work_finished=True) == WORK_DONE_ABORT
    assert hint_for(abort, work_finished=False) is None  # mid-training: a crash like any other


# Recorded texts: torch 2.13 here (the first), and GPU failures as users posted them (the sources
# are the issue threads named beside each).
RECORDED = {
    "accelerator": ("RuntimeError: Cannot access accelerator device when none is available."),
    # github.com/lllyasviel/Fooocus/issues/1902
    "oom": (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 10.00 MiB. GPU 0 has a total "
        "capacty of 6.00 GiB of which 1.57 GiB is free. Of the allocated memory 3.24 GiB is allocated by"
        " PyTorch, and 154.45 MiB is reserved by PyTorch but unallocated. If reserved but unallocated "
        "memory is large try setting max_split_size_mb to avoid fragmentation."
    ),
    # github.com/murong-xu/CADS/issues/4
    "fragmented": (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 22.78 GiB. GPU 0 has a total "
        "capacity of 31.47 GiB of which 12.73 GiB is free. Including non-PyTorch memory, this process "
        "has 18.73 GiB memory in use. Of the allocated memory 9.08 GiB is allocated by PyTorch, and 9.35"
        " GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try "
        "setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation."
    ),
    # github.com/XPixelGroup/BasicSR/issues/737
    "watchdog": (
        "[rank1]:[E626 06:24:44.903881913 ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught collective "
        "operation timeout: WorkNCCL(SeqNum=808, OpType=ALLREDUCE, NumelIn=9801523, NumelOut=9801523, "
        "Timeout(ms)=600000) ran for 600020 milliseconds before timing out."
    ),
    "duplicate": (
        "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, invalid usage, "
        "NCCL version 2.21.5\nncclInvalidUsage: This usually reflects invalid usage of NCCL library.\n"
        "Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1000"
    ),
}


def hint(name: str, program: bool) -> str:
    return hint_for(RootCause(1, 1, None, RECORDED[name].splitlines()[0], RECORDED[name]), program=program)


def test_a_script_is_told_what_to_change_in_the_script_not_a_flag_of_mgpu_tui():
    for text in ("accelerator",):
        mode, script = hint(text, False), hint(text, True)
        assert "--device cpu" in mode
        assert "--device" not in script and 'init_process_group("nccl" if torch.cuda.is_available()' in script
    assert "LOCAL_RANK" in hint("duplicate", True) and "--share-gpus" not in hint("duplicate", True)


def test_out_of_memory_says_fragmentation_when_the_allocator_held_much_unused():
    assert "expandable_segments:True" in hint("fragmented", True)
    assert "9.35 GiB" in hint("fragmented", True) and "9.08 GiB" in hint("fragmented", True)
    plain_oom = hint("oom", True)  # 154 MiB reserved beside 3.24 GiB: just too big
    assert "expandable_segments" not in plain_oom and "fully_shard" in plain_oom
    assert "--amp" in hint("oom", False)


def test_the_nccl_watchdog_timeout_points_at_the_rank_that_never_joined():
    text = hint("watchdog", True)
    assert "never joined" in text and "timeout=" in text
