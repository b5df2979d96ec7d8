"""Every torch API mgpu-tui wraps, called with keywords as frameworks call them (Lightning and
Fabric: ``DistributedDataParallel(module=...)``, ``FullyShardedDataParallel(module=...)``), from a
DDP subclass's ``super().__init__(module=...)``, with a process group made by ``init_device_mesh``,
and with a batch of the script's own type that any code reading it as a tensor fails on; then the
whole DDP model checkpointed with ``torch.save``, deep-copied and pickled. It knows
nothing of mgpu-tui; each rank prints what it computed, which must be the same under any launcher:
    RESULT {"rank": 0, "world_size": 2, "losses": [...], "weights": 1.234}
"""

import copy
import json
import os
import pickle
import sys
import tempfile

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FullyShardedDataParallel, fully_shard
from torch.nn.parallel import DistributedDataParallel

STEPS = 6


class MyDDP(DistributedDataParallel):
    """A DDP of the script's own, as frameworks subclass it."""

    def __init__(self, model):
        super().__init__(module=model)


class Batch:
    """A batch of the script's own: it looks like a tensor (dim, shape, is_floating_point), but its
    shape cannot be read. The model knows to take ``.data``."""

    def __init__(self, data):
        self.data = data

    def dim(self):
        return self.data.dim()

    def is_floating_point(self):
        return True

    @property
    def shape(self):
        raise RuntimeError("this batch has no shape")


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(8, 1)

    def forward(self, x):
        return self.layer(x.data if isinstance(x, Batch) else x)


def main():
    mesh = init_device_mesh("cpu", (int(os.environ["WORLD_SIZE"]),))
    rank, world = dist.get_rank(), dist.get_world_size()
    assert mesh.size() == world
    torch.manual_seed(0)
    model = MyDDP(Net())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu")
    data = torch.randn(STEPS, 4, 8, generator=torch.Generator().manual_seed(rank))
    losses = []
    for step in range(STEPS):
        x = data[step] if step < STEPS // 2 else Batch(data[step])
        optimizer.zero_grad()
        loss = model(x).pow(2).mean()
        scaled = scaler.scale(outputs=loss)
        if step % 2:
            torch.autograd.backward(tensors=scaled)
        else:
            scaled.backward(gradient=torch.ones_like(scaled))
        scaler.step(optimizer=optimizer)
        scaler.update()
        losses.append(round(loss.item(), 6))
    # FSDP, both generations, each wrapped by keyword and taking one step of its own.
    for wrap in (
        lambda m: FullyShardedDataParallel(module=m, device_id=torch.device("cpu")),
        lambda m: fully_shard(module=m),
    ):
        torch.manual_seed(1)
        sharded = wrap(Net())
        opt = torch.optim.SGD(sharded.parameters(), lr=0.1)
        sharded(torch.ones(2, 8)).sum().backward()
        opt.step()
    weights = sum(float(p.detach().sum()) for p in model.parameters())
    # The whole DDP model checkpointed, pickled and deep-copied, as scripts do, and read back.
    path = os.path.join(tempfile.mkdtemp(), "model.pt")
    torch.save(model, path)
    with open(path, "rb") as f:
        clean = b"mgpu_tui" not in f.read()  # nothing of a monitor in the user's checkpoint
    again = torch.load(path, weights_only=False)
    copied = copy.deepcopy(model.module)
    pickle.loads(pickle.dumps(model.module))
    same = all(torch.equal(a, b) for a, b in zip(again.parameters(), copied.parameters()))
    result = {"rank": rank, "world_size": world, "losses": losses, "weights": round(weights, 6),
              "checkpoint": {"clean": clean, "same": same}}  # fmt: skip
    sys.stdout.write(f"RESULT {json.dumps(result)}\n")  # one write: the ranks share a pipe
    sys.stdout.flush()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
