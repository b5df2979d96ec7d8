"""A GAN's training loop: a generator and a discriminator, each under DDP with its own optimizer,
two backward passes and two optimizer steps an iteration. It knows nothing of mgpu-tui."""

import argparse

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

parser = argparse.ArgumentParser()
parser.add_argument("--iters", type=int, default=12)
parser.add_argument("--batch", type=int, default=8)
args = parser.parse_args()

dist.init_process_group("gloo")
torch.manual_seed(0)
netG = DDP(nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 16)))
netD = DDP(nn.Sequential(nn.Linear(16, 32), nn.LeakyReLU(0.2), nn.Linear(32, 1)))
optG = torch.optim.Adam(netG.parameters(), lr=2e-4, betas=(0.5, 0.999))
optD = torch.optim.Adam(netD.parameters(), lr=2e-4, betas=(0.5, 0.999))
criterion = nn.BCEWithLogitsLoss()
for it in range(args.iters):
    real = torch.randn(args.batch, 16) + 2.0
    noise = torch.randn(args.batch, 8)
    fake = netG(noise)
    optD.zero_grad()
    errD = criterion(netD(real), torch.ones(args.batch, 1)) + criterion(
        netD(fake.detach()), torch.zeros(args.batch, 1)
    )
    errD.backward()
    optD.step()
    optG.zero_grad()
    errG = criterion(netD(fake), torch.ones(args.batch, 1))
    errG.backward()
    optG.step()
    if dist.get_rank() == 0:
        print(f"[{it}/{args.iters}] Loss_D: {errD.item():.4f} Loss_G: {errG.item():.4f}", flush=True)
dist.destroy_process_group()
