"""A plain DDP loop with one cause of slowness planted (issue 41): written as users write theirs,
knowing nothing of mgpu-tui.

    torchrun --nproc-per-node 2 anatomy_train.py --slow-data-rank 1 --sleep 0.03
    torchrun --nproc-per-node 2 anatomy_train.py --width 2048        (8M parameters: communication)
    torchrun --nproc-per-node 2 anatomy_train.py --compute 40        (heavy forward, tiny gradients)
    ... --workers 2   (a DataLoader with worker processes)     ... --no-loader   (batches made by hand)

Prints ``RESULT step=<n> loss=<x>`` at the end, on rank 0.
"""

import argparse
import gc
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset


class Items(Dataset):
    def __init__(self, n: int, features: int, sleep_s: float) -> None:
        self.n, self.features, self.sleep_s = n, features, sleep_s

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        if self.sleep_s:
            time.sleep(self.sleep_s)  # a slow disk, or a heavy transform
        g = torch.Generator().manual_seed(i)
        return torch.randn(self.features, generator=g), torch.randn(1, generator=g)


class Heavy(torch.nn.Module):
    """A small layer applied ``times`` times: much compute, few parameters."""

    def __init__(self, features: int, width: int, times: int) -> None:
        super().__init__()
        self.inp = torch.nn.Linear(features, width)
        self.mid = torch.nn.Linear(width, width)
        self.out = torch.nn.Linear(width, 1)
        self.times = times

    def forward(self, x):
        h = torch.relu(self.inp(x))
        for _ in range(self.times):
            h = torch.tanh(self.mid(h))
        return self.out(h)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--features", type=int, default=64)
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--compute", type=int, default=1, help="times the middle layer runs")
    p.add_argument("--slow-data-rank", type=int, default=-1)
    p.add_argument("--sleep", type=float, default=0.0, help="seconds an item, on the slow rank")
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--no-loader", action="store_true")
    p.add_argument("--device", default="cpu", help="cuda: each rank on its local GPU, over NCCL")
    args = p.parse_args()

    cuda = args.device == "cuda"
    dist.init_process_group("nccl" if cuda else "gloo")
    rank = dist.get_rank()
    device = (
        torch.device("cuda", dist.get_rank() % torch.cuda.device_count()) if cuda else torch.device("cpu")
    )
    torch.manual_seed(0)
    model = DistributedDataParallel(Heavy(args.features, args.width, args.compute).to(device))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    sleep_s = args.sleep if rank == args.slow_data_rank else 0.0
    items = Items(args.batch * args.steps, args.features, sleep_s)
    if args.no_loader:
        batches = (
            (torch.stack([items[i][0] for i in range(s, s + args.batch)]),
             torch.stack([items[i][1] for i in range(s, s + args.batch)]))
            for s in range(0, len(items), args.batch)
        )  # fmt: skip
    else:
        batches = DataLoader(items, batch_size=args.batch, num_workers=args.workers)
    step = 0
    loss = torch.zeros(())
    for x, y in batches:
        x, y = x.to(device), y.to(device)
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        step += 1
    if rank == 0:
        print(f"RESULT step={step} loss={loss.item():.6f}", flush=True)
    # As torch's own examples end: drop the DDP model first, so gloo's teardown at exit does not
    # race the reducer's last references (a SIGABRT at exit, 1 run in ~30 on a loaded machine).
    del model, optimizer, loss
    gc.collect()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
