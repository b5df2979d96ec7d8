"""One job, run bare and under `mgpu-tui exec` (or torchrun and the drop-in) by
tests/integration/test_as_bare.py, which compares what it saw each way. ``--steps N`` first trains N
steps of a small model (so that the watch has something to count), or trains until a Ctrl-C or a
SIGTERM with ``--steps 0``; ``READY <rank>`` on stdout once it trains. Then the ACTION. What it saw goes to
``--out`` (a JSON file at an absolute path the test gives), never to the streams under test.

    interrupt   a Ctrl-C saves a checkpoint (``except KeyboardInterrupt``) and exits 0
    spawn       the same in two ranks started by mp.spawn (gloo), each its own checkpoint
    term        SIGTERM's handler takes --takes seconds to save, then exits 0
    finish      trains --steps and exits 0 (a hangup under nohup must not end it)
    reopen      40 lines on stderr, then /dev/stderr and /dev/stdout reopened by name, 40 more
    chdir       changes directory first, then trains (its events and flight records still reach the
                run); ``--group``: in torchrun's process group, ``--pause S`` after each step
    stdin       reads its stdin whole; seeks it back to 0 where it can
    tty         isatty() of 0-2, the window size, its signals and limits; tqdm's bar on stderr
    long        one line of --size bytes on stdout, then "after"
    exit        exits with --code, or kills itself with SIGKILL (--code -9)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import signal
import sys
import time


def train(steps: int, rank: int = 0, *, group: bool = False, pause: float = 0.0) -> int:
    import torch

    if group:  # torchrun's ranks: gloo from its environment, a collective a step (flight records)
        import torch.distributed as dist

        dist.init_process_group("gloo")
    torch.manual_seed(rank)
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    step = 0
    while steps == 0 or step < steps:
        loss = model(torch.randn(16, 8)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if group:
            dist.all_reduce(torch.ones(4))
        step += 1
        if step == 3:
            print(f"READY {os.environ.get('RANK', rank)}", flush=True)
        if steps == 0 or pause:
            time.sleep(pause or 0.05)
    return step


def save(path: str, what: dict) -> None:
    with open(path + ".tmp", "w") as f:
        json.dump(what, f)
    os.replace(path + ".tmp", path)


def spawned(rank: int, out: str) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", rank=rank, world_size=2)  # a rank, each training alone: a Ctrl-C
    try:  # never finds one in a collective that the other has left
        train(0, rank)
    except KeyboardInterrupt:
        save(f"{out}.rank{rank}", {"checkpoint": rank})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("action")
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", type=int, default=0)
    parser.add_argument("--takes", type=float, default=0)
    parser.add_argument("--size", type=int, default=70_000)
    parser.add_argument("--code", type=int, default=0)
    parser.add_argument("--group", action="store_true")
    parser.add_argument("--pause", type=float, default=0.0)
    args = parser.parse_args()
    if "RANK" in os.environ:  # a rank of torchrun's (or the drop-in's): a file of its own
        args.out += f".rank{os.environ['RANK']}"
    seen: dict = {"cwd": os.getcwd()}
    if args.action == "chdir":
        os.makedirs("elsewhere", exist_ok=True)
        os.chdir("elsewhere")  # Hydra's older default: the job's own output folder
    if args.action == "spawn":
        import torch.multiprocessing as mp

        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(20000 + os.getpid() % 20000))
        context = mp.spawn(spawned, args=(args.out,), nprocs=2, join=False)
        try:
            while not context.join():
                pass
        except KeyboardInterrupt:  # the parent's own Ctrl-C: the ranks save theirs, then end
            while not context.join():
                pass
            seen["parent"] = "interrupted"
        save(args.out, seen)
        return
    if args.action == "term":

        def on_term(signum, frame):
            time.sleep(args.takes)  # a checkpoint that takes this long to write
            save(args.out, {**seen, "checkpoint": "whole"})
            os._exit(0)  # at once: the interpreter's own end (torch's) is not the handler's time

        signal.signal(signal.SIGTERM, on_term)
    if args.action in ("interrupt", "term", "finish", "chdir"):
        try:
            seen["steps"] = train(args.steps, group=args.group, pause=args.pause)
        except KeyboardInterrupt:
            seen["checkpoint"] = "saved on KeyboardInterrupt"
    elif args.action == "reopen":
        for i in range(40):  # a write a line (print writes its end apart, unbuffered)
            sys.stderr.write(f"line {i}\n")
        os.system("echo warning > /dev/stderr")
        with open("/dev/stdout", "w") as out:
            out.write("reopened stdout\n")
        for i in range(40, 80):
            sys.stderr.write(f"line {i}\n")
    elif args.action == "stdin":
        data = sys.stdin.buffer.read()
        seen["stdin"] = hashlib.sha256(data).hexdigest()
        try:
            sys.stdin.seek(0)
            seen["seek"] = hashlib.sha256(sys.stdin.buffer.read()).hexdigest()
        except OSError as exc:
            seen["seek"] = exc.__class__.__name__
    elif args.action == "tty":
        seen["isatty"] = [os.isatty(fd) for fd in (0, 1, 2)]
        seen["size"] = list(os.get_terminal_size(2)) if os.isatty(2) else None
        seen["foreground"] = os.isatty(0) and os.getpgrp() == os.tcgetpgrp(0)  # Ctrl-C reaches it
        seen["signals"] = [str(signal.getsignal(s)) for s in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM)]
        seen["open_files"] = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        from tqdm import tqdm

        for _ in tqdm(range(30), mininterval=0, miniters=1, ncols=60):
            time.sleep(0.01)
    elif args.action == "long":
        print("x" * args.size, flush=True)
        print("after", flush=True)
    elif args.action == "exit":
        if args.code < 0:
            os.kill(os.getpid(), -args.code)
        sys.exit(args.code)
    save(args.out, seen)


if __name__ == "__main__":
    main()
