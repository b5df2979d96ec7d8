"""A plain training loop with Hugging Face accelerate, as its docs show it: an Accelerator with
gradient accumulation, ``accelerator.prepare`` of the model, optimizer and DataLoader, the
``accelerator.accumulate(model)`` context, ``accelerator.backward(loss)``. It knows nothing of
mgpu-tui. Each rank prints its own account at the end:
    RESULT {"rank": 0, "world_size": 2, "steps": 6, "batch": 8, "accumulation": 2, "loss": 0.1}
where steps are optimizer steps, batch is one rank's micro-batch and loss the last step's (the mean
of its micro-batches' losses).
"""

import json
import sys

import torch
import torch.nn.functional as F
from accelerate import Accelerator
from torch.utils.data import DataLoader, TensorDataset

ACCUMULATION = 2
BATCH = 8


def main():
    accelerator = Accelerator(gradient_accumulation_steps=ACCUMULATION)
    torch.manual_seed(0)
    x = torch.randn(192, 16)
    data = TensorDataset(x, x.sum(dim=1, keepdim=True) * 0.1)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    loader = DataLoader(data, batch_size=BATCH, shuffle=False)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    steps, micro, step_loss = 0, [], None
    for inputs, targets in loader:
        with accelerator.accumulate(model):
            loss = F.mse_loss(model(inputs), targets)
            micro.append(loss.item())
            accelerator.backward(loss)
            optimizer.step()
            if accelerator.sync_gradients:
                steps += 1
                step_loss, micro = sum(micro) / len(micro), []  # the step's loss: its micro-batches' mean
            optimizer.zero_grad()
    result = {
        "rank": accelerator.process_index,
        "world_size": accelerator.num_processes,
        "steps": steps,
        "batch": BATCH,
        "accumulation": ACCUMULATION,
        "loss": step_loss,
    }
    sys.stdout.write(f"RESULT {json.dumps(result)}\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
