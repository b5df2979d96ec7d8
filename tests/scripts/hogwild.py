"""Hogwild training in the shape of pytorch/examples' mnist_hogwild: one model in shared memory,
``torch.multiprocessing`` processes (spawn) each training it with its own optimizer and
DataLoader, no process group; then the parent evaluates the model. It knows nothing of mgpu-tui.
Each trainer prints its own account at the end, its samples/s over its steps after the first
five (the steps a summary counts as steady):
    RESULT {"rank": 0, "pid": 123, "steps": 40, "samples_per_s": 512.0, "loss": 0.9}

--fail-trainer K raises an IndexError in trainer K at step --fail-at (its parent still exits 0:
it never looks at its children's exit codes, as mnist_hogwild does not).
"""

import argparse
import json
import os
import sys
import time

import torch
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.hidden = nn.Linear(64, 128)
        self.out = nn.Linear(128, 10)

    def forward(self, x):
        return F.log_softmax(self.out(F.relu(self.hidden(x))), dim=1)


def data(seed, n):
    g = torch.Generator().manual_seed(seed)
    return TensorDataset(torch.randn(n, 64, generator=g), torch.randint(0, 10, (n,), generator=g))


def train(index, args, model):
    torch.manual_seed(args.seed + index)
    loader = DataLoader(data(index, args.steps * args.batch), batch_size=args.batch, shuffle=True)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.5)
    model.train()
    ends, loss = [], None
    for step, (x, y) in enumerate(loader):
        if index == args.fail_trainer and step == args.fail_at:
            raise IndexError(f"trainer {index}: batch {step} out of range")
        optimizer.zero_grad()
        loss = F.nll_loss(model(x), y)
        loss.backward()
        optimizer.step()
        ends.append(time.perf_counter())
    steady = ends[5:]
    rate = (len(steady) - 1) * args.batch / (steady[-1] - steady[0])
    result = {"rank": index, "pid": os.getpid(), "steps": len(ends), "samples_per_s": rate}
    result["loss"] = loss.item()
    sys.stdout.write(f"RESULT {json.dumps(result)}\n")
    sys.stdout.flush()


def evaluate(model, args):
    model.eval()
    correct = 0
    with torch.no_grad():
        for x, y in DataLoader(data(99, 512), batch_size=128):
            correct += int((model(x).argmax(1) == y).sum())
    print(f"evaluation: {correct}/512", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--trainers", type=int, default=2)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--fail-trainer", type=int, default=-1)
    parser.add_argument("--fail-at", type=int, default=-1)
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    mp.set_start_method("spawn", force=True)
    model = Net()
    model.share_memory()
    processes = []
    for index in range(args.trainers):
        p = mp.Process(target=train, args=(index, args, model))
        p.start()
        processes.append(p)
    for p in processes:
        p.join()
    evaluate(model, args)
