"""The DDP example of PyTorch's "Getting Started with Distributed Data Parallel" tutorial, in its
shape: ``mp.spawn(demo_basic, args=(world_size,), nprocs=world_size)`` from ``__main__``, each
process setting MASTER_ADDR and MASTER_PORT itself, then init_process_group, a DDP model, a loop.
It knows nothing of mgpu-tui. Each rank prints its own account at the end:
    RESULT {"rank": 0, "world_size": 2, "steps": 20, "batch": 16, "loss": 0.12}

--port N fixes MASTER_PORT (the tutorial's "12355"); without it, a free one is chosen before
spawning. --hang-rank R stops rank R in its data loading at --hang-at; --fail-rank R raises there.
--start-method fork uses torch.multiprocessing.start_processes(start_method="fork") instead.
--lr-finder N first runs a learning-rate finder of N steps in the parent process (no process group:
a helper before the job), and prints its own account:
    FINDER {"steps": 5, "lr": 0.01}
"""

import argparse
import json
import os
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.optim as optim
from torch.nn.parallel import DistributedDataParallel as DDP


class ToyModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.net1 = nn.Linear(10, 10)
        self.relu = nn.ReLU()
        self.net2 = nn.Linear(10, 5)

    def forward(self, x):
        return self.net2(self.relu(self.net1(x)))


def setup(rank, world_size, port):
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)


def get_batch(step, rank, args):
    if step == args.hang_at and rank == args.hang_rank:
        while True:  # a data loader that never delivers
            time.sleep(0.5)
    if step == args.fail_at and rank == args.fail_rank:
        raise ValueError(f"corrupt sample in shard {rank} at step {step}")
    g = torch.Generator().manual_seed(1000 * rank + step)
    return torch.randn(args.batch, 10, generator=g), torch.randn(args.batch, 5, generator=g)


def demo_basic(rank, world_size, args):
    setup(rank, world_size, args.port)
    torch.manual_seed(0)
    model = ToyModel()
    ddp_model = DDP(model)
    loss_fn = nn.MSELoss()
    optimizer = optim.SGD(ddp_model.parameters(), lr=0.01)
    loss = None
    for step in range(args.steps):
        x, y = get_batch(step, rank, args)
        optimizer.zero_grad()
        loss = loss_fn(ddp_model(x), y)
        loss.backward()
        optimizer.step()
        if args.step_sleep:
            time.sleep(args.step_sleep)
    result = {
        "rank": rank,
        "world_size": world_size,
        "steps": args.steps,
        "batch": args.batch,
        "loss": loss.item(),
    }
    sys.stdout.write(f"RESULT {json.dumps(result)}\n")
    sys.stdout.flush()
    dist.destroy_process_group()


def find_lr(args):
    """A learning-rate range test: one step at each of a rising series of rates, the loss after each."""
    torch.manual_seed(0)
    model, loss_fn = ToyModel(), nn.MSELoss()
    optimizer = optim.SGD(model.parameters(), lr=1e-4)
    losses = {}
    for step in range(args.lr_finder):
        lr = 1e-4 * 10 ** (4 * step / max(1, args.lr_finder - 1))
        for group in optimizer.param_groups:
            group["lr"] = lr
        x, y = get_batch(step, 0, args)
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        losses[lr] = loss.item()
    sys.stdout.write(f"FINDER {json.dumps({'steps': args.lr_finder, 'lr': min(losses, key=losses.get)})}\n")
    sys.stdout.flush()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--port", type=int, default=None)
    parser.add_argument("--step-sleep", type=float, default=0.0)
    parser.add_argument("--hang-rank", type=int, default=-1)
    parser.add_argument("--hang-at", type=int, default=-1)
    parser.add_argument("--fail-rank", type=int, default=-1)
    parser.add_argument("--fail-at", type=int, default=-1)
    parser.add_argument("--start-method", default="spawn")
    parser.add_argument("--lr-finder", type=int, default=0)
    args = parser.parse_args()
    args.port = args.port or free_port()
    if args.lr_finder:
        find_lr(args)
    if args.start_method == "spawn":
        mp.spawn(demo_basic, args=(args.world_size, args), nprocs=args.world_size, join=True)
    else:
        mp.start_processes(
            demo_basic, args=(args.world_size, args), nprocs=args.world_size, start_method=args.start_method
        )
