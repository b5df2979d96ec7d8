"""A hyper-parameter sweep over a multiprocessing Pool: each task trains a small model of its own
(no process group) at one learning rate and returns its loss; with fewer workers than rates, a
worker trains more than once. It knows nothing of mgpu-tui. Each task prints its own account:
    RESULT {"rank": 0, "lr": 0.1, "pid": 123, "steps": 12, "loss": 0.5}
(``rank``: the task's index in the sweep.)
"""

import argparse
import json
import multiprocessing as mp
import os
import sys

import torch
import torch.nn as nn


def train(task):
    index, lr, steps = task
    torch.manual_seed(index)
    model = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    g = torch.Generator().manual_seed(100 + index)
    x, y = torch.randn(256, 16, generator=g), torch.randn(256, 1, generator=g)
    for step in range(steps):
        batch = slice((step * 32) % 256, (step * 32) % 256 + 32)
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x[batch]), y[batch])
        loss.backward()
        optimizer.step()
    result = {"rank": index, "lr": lr, "pid": os.getpid(), "steps": steps, "loss": loss.item()}
    sys.stdout.write(f"RESULT {json.dumps(result)}\n")
    sys.stdout.flush()
    return loss.item()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--rates", default="0.3,0.1,0.03")
    parser.add_argument("--start-method", default="fork")
    args = parser.parse_args()
    rates = [float(r) for r in args.rates.split(",")]
    with mp.get_context(args.start_method).Pool(args.workers) as pool:
        losses = pool.map(train, [(i, lr, args.steps) for i, lr in enumerate(rates)])
    print("best rate", rates[losses.index(min(losses))], flush=True)
