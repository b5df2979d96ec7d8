"""A job that writes one line into mgpu-tui's events in a rank's name before it trains: a hello
claiming a world size of 2**20, with its own real pid (a rank can write every file of its run
folder). Then a short training of one process. It prints its own account:
    RESULT {"rank": 0, "steps": 20, "loss": 0.5}
"""

import json
import os
import sys
import time

import torch
import torch.nn as nn

if __name__ == "__main__":
    forged = {
        "v": 1, "kind": "hello", "rank": 0, "t": time.time(), "local_rank": 0, "world_size": 2**20,
        "pid": os.getpid(), "host": "h", "device": "cpu", "device_uuid": None, "mode": "script",
        "config": {}, "stacks": True,
    }  # fmt: skip
    events = os.path.join(os.environ["MGPU_RUN_DIR"], "events")
    os.makedirs(events, exist_ok=True)
    with open(os.path.join(events, "rank0.jsonl"), "a") as f:
        f.write(json.dumps(forged) + "\n")
    torch.manual_seed(0)
    model = nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(20):
        optimizer.zero_grad()
        loss = model(torch.randn(4, 8)).pow(2).mean()
        loss.backward()
        optimizer.step()
        time.sleep(0.1)
    sys.stdout.write(f"RESULT {json.dumps({'rank': 0, 'steps': 20, 'loss': loss.item()})}\n")
