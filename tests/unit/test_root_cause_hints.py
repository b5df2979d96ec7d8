"""Root causes with what they mean: the signatures that have no reproduction on a CPU, from the
error texts torch, NCCL and CUDA print (tests/integration/test_hints.py reproduces the others)."""

import pytest

from mgpu_tui.engine.run.rootcause import WORK_DONE_ABORT, RootCause, hint_for

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
        "lost a peer",
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
