"""An MLP split over 2 ranks by tensor parallelism (DTensor: parallelize_module, the first layer by
columns and the second by rows), the way torch's tensor-parallel tutorial builds it. It knows
nothing of mgpu-tui."""

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

dist.init_process_group("gloo")
mesh = init_device_mesh("cpu", (dist.get_world_size(),))
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(32, 128), torch.nn.ReLU(), torch.nn.Linear(128, 32))
model = parallelize_module(model, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
torch.manual_seed(1)  # the same batch on every rank: tensor parallelism splits the model, not the data
for _ in range(8):
    model(torch.randn(16, 32)).square().mean().backward()
    optimizer.step()
    optimizer.zero_grad()
dist.destroy_process_group()
