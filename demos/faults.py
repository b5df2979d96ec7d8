"""Fault injection for the demos, off unless asked for: how mgpu-tui's failure handling is shown and tested.

``--fail-at-step K --fail-rank R --fail-kind KIND`` makes rank R fail as step K is about
to begin; ``--log-rate N`` adds N numbered log lines a second. The demos never call
this module: the reporting hook (reporting.py) does, so a training loop reads as one.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time

import torch

FAIL_KINDS = ("exception", "exit", "segv", "abort", "hang", "oom", "slow")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    faults = parser.add_argument_group("fault injection (off unless asked for)")
    faults.add_argument("--fail-at-step", type=int, metavar="K", help="fail as step K begins")
    faults.add_argument("--fail-rank", type=int, default=0, metavar="R", help="the rank that fails")
    faults.add_argument(
        "--fail-kind",
        choices=FAIL_KINDS,
        default="exception",
        help="raise; exit 3; SIGSEGV; abort(); hang forever (the stall watch); oom: "
        "allocate until the allocator fails (CUDA), a MemoryError on the CPU; slow: "
        "from step K (default 1) on, load each batch --slow-ms later (a straggler)",
    )
    faults.add_argument(
        "--slow-ms",
        type=float,
        default=50.0,
        metavar="MS",
        help="with --fail-kind slow: the delay added to each of its steps (default 50)",
    )
    faults.add_argument(
        "--log-rate",
        type=int,
        default=0,
        metavar="N",
        help="also print N numbered lines a second, to test log handling",
    )


def maybe_slow(args: argparse.Namespace, step: int, rank: int) -> None:
    """--fail-kind slow: the chosen rank takes --slow-ms longer over each batch, before its
    collectives, as a rank with a slow disk or data loader would. The others wait for it."""
    if args.fail_kind == "slow" and rank == args.fail_rank and step >= (args.fail_at_step or 1):
        time.sleep(args.slow_ms / 1000)


def maybe_fail(args: argparse.Namespace, step: int, rank: int, device: torch.device) -> None:
    """Fail now if step ``step`` of rank ``rank`` is the one asked for."""
    if args.fail_at_step != step or args.fail_rank != rank or args.fail_kind == "slow":
        return
    kind = args.fail_kind
    print(f"injecting a failure ({kind}) at step {step} on rank {rank}", file=sys.stderr, flush=True)
    if kind == "hang":
        while True:  # the other ranks will wait for this one in their next collective
            time.sleep(1)
    if kind == "exit":
        os._exit(3)  # no traceback, no error file: as a library calling exit() would
    if kind == "segv":
        os.kill(os.getpid(), signal.SIGSEGV)  # the signal a crash in native code brings
    if kind == "abort":
        os.abort()  # SIGABRT, as a failed C++ assertion
    if kind == "oom":
        _run_out_of_memory(device)
    raise RuntimeError(f"injected failure at step {step} on rank {rank}")


def _run_out_of_memory(device: torch.device) -> None:
    """On CUDA, allocate 1 GiB blocks until the allocator fails (torch.OutOfMemoryError).

    On the CPU, running the host out of memory would bring the OOM killer down on
    anything; a bounded stand-in raises MemoryError after 256 MiB instead.
    """
    held = []
    if device.type == "cuda":
        while True:
            held.append(torch.empty(2**30, dtype=torch.uint8, device=device))
    for _ in range(4):
        held.append(torch.empty(2**26, dtype=torch.uint8))
    raise MemoryError(f"injected out-of-memory on {device} after {len(held) * 64} MiB")


def start_log_flood(args: argparse.Namespace) -> None:
    """With --log-rate N, print N numbered lines a second from a daemon thread ("flood <i>")."""
    if not args.log_rate:
        return

    def flood() -> None:
        i, start = 0, time.monotonic()
        while True:
            due = int((time.monotonic() - start) * args.log_rate)
            while i < due:
                sys.stdout.write(f"flood {i}\n")  # one write per line: print() makes two, and a
                i += 1  # line printed meanwhile by the training loop could land between them
            sys.stdout.flush()
            time.sleep(0.01)

    threading.Thread(target=flood, name="log-flood", daemon=True).start()
