"""An evaluation job: no optimizer, no backward; each rank scores its shard of the data and the
ranks sum their counts with all_reduce. It knows nothing of mgpu-tui."""

import argparse

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--batches", type=int, default=30)
args = parser.parse_args()

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = torch.nn.Linear(16, 4).eval()
correct = total = 0
with torch.no_grad():
    for batch in range(rank, args.batches * world, world):
        x = torch.randn(32, 16, generator=torch.Generator().manual_seed(batch))
        y = torch.randint(0, 4, (32,), generator=torch.Generator().manual_seed(batch + 1))
        counts = torch.tensor([(model(x).argmax(1) == y).sum().item(), 32.0])
        dist.all_reduce(counts)
        correct, total = correct + counts[0].item(), total + counts[1].item()
if rank == 0:
    print(f"accuracy {correct / total:.4f} on {int(total)} samples", flush=True)
dist.destroy_process_group()
