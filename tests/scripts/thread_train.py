"""A one-process job that trains in a worker thread while its main thread waits for it in
``join`` (a service that trains in the background, a GUI's worker). It knows nothing of mgpu-tui.

--eval-at S --eval-s T: after step S, an evaluation of T seconds in the training thread (forward
passes under no_grad, nothing stepped: its stack moves, and nothing else says it is alive).
--hang-at S: the training thread waits for ever after step S (a lock never released: a real hang).
At the end it prints its own account:
    RESULT {"rank": 0, "steps": 20, "loss": 0.5}
"""

import argparse
import json
import sys
import threading
import time

import torch
import torch.nn as nn


def evaluate(seconds):
    """A held-out evaluation, as a language model's: a small transformer over token batches."""
    torch.manual_seed(1)
    layer = nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, dropout=0.0, batch_first=True)
    judge = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
    end = time.monotonic() + seconds
    with torch.no_grad():
        while time.monotonic() < end:
            judge(torch.randn(8, 16, 32)).mean().item()


def train(args, result):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(1, args.steps + 1):
        x, y = torch.randn(16, 32), torch.randn(16, 1)
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        result["loss"] = loss.item()
        time.sleep(args.step_sleep)
        if step == args.eval_at:
            evaluate(args.eval_s)
        if step == args.hang_at:
            threading.Lock().acquire() and threading.Event().wait()  # never set
    result["steps"] = args.steps


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--step-sleep", type=float, default=0.05)
    parser.add_argument("--eval-at", type=int, default=-1)
    parser.add_argument("--eval-s", type=float, default=0.0)
    parser.add_argument("--hang-at", type=int, default=-1)
    args = parser.parse_args()
    result = {"rank": 0}
    worker = threading.Thread(target=train, args=(args, result), name="trainer", daemon=True)
    worker.start()
    worker.join()
    sys.stdout.write(f"RESULT {json.dumps(result)}\n")
