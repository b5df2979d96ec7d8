"""A plain loop over a torch.compile'd MLP (or the same MLP eager, --eager), knowing nothing of
mgpu-tui (issues 42 and 54): with ``--backend counting`` (the default) the compiled graph counts its
own runs (a backend that wraps the graph), step by step; with ``--backend inductor`` it is compiled
for real. At the end the script counts one eager step itself with torch's FLOP counter. Prints, on
rank 0:
    RESULT {"rank": 0, "steps": 50, "compiled_runs": [1, 1, ...], "flops": 12345}
"""

import argparse
import json
import os

import torch
import torch.distributed as dist
from torch.utils.flop_counter import FlopCounterMode

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=50)
parser.add_argument("--eager", action="store_true", help="no torch.compile: the plain script")
parser.add_argument("--backend", default="counting", help="counting (its graph run as it is), or inductor")
args = parser.parse_args()
runs = []


def counting(graph, example_inputs):
    def run(*inputs):
        runs.append(1)
        return graph.forward(*inputs)

    return run


distributed = "RANK" in os.environ
if distributed:
    dist.init_process_group("gloo")
torch.manual_seed(0)
eager = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 8))
backend = counting if args.backend == "counting" else args.backend
model = eager if args.eager else torch.compile(eager, backend=backend)
if distributed:
    model = torch.nn.parallel.DistributedDataParallel(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(16, 32), torch.randn(16, 8)
per_step = []
for _ in range(args.steps):
    before = len(runs)
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    per_step.append(len(runs) - before)
with FlopCounterMode(display=False) as counter:
    torch.nn.functional.mse_loss(eager(x), y).backward()
if not distributed or dist.get_rank() == 0:
    result = {"rank": 0, "steps": args.steps, "compiled_runs": per_step, "flops": counter.get_total_flops()}
    print("RESULT " + json.dumps(result))
if distributed:
    dist.destroy_process_group()
