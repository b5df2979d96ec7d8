"""Mixed precision as torch.amp recommends it: autocast for the forward pass, a GradScaler for the
backward and the step, under DDP. One iteration's loss is infinite on purpose (--inf-at), so the
scaler skips that optimizer step as it does after an overflow. Prints each unscaled loss."""

import argparse
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

parser = argparse.ArgumentParser()
parser.add_argument("--iters", type=int, default=15)
parser.add_argument("--inf-at", type=int, default=5)
args = parser.parse_args()

dist.init_process_group("gloo")
rank = int(os.environ["RANK"])
device = "cpu"
torch.manual_seed(0)
model = DDP(torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
scaler = torch.amp.GradScaler(device, init_scale=1024.0)
torch.manual_seed(rank)
for it in range(args.iters):
    x, y = torch.randn(16, 32), torch.randn(16, 1)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        loss = torch.nn.functional.mse_loss(model(x).float(), y)
    if it == args.inf_at:
        loss = loss * float("inf")  # an overflow: the scaler skips this step
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
    print(f"iter {it} loss {loss.item():.6f} scale {scaler.get_scale():.0f}", flush=True)
dist.destroy_process_group()
