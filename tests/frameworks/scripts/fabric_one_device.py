"""Lightning Fabric on one CPU device, as its own docs write a loop: ``fabric.setup`` on the model and
its optimizer, ``fabric.backward``, a few steps of a small model. Knows nothing of mgpu-tui. Under
the old FLOP count (a replay of the forward on fake and meta tensors) this job died under
``mgpu-tui exec``: the replay raised a RuntimeError on the meta device into it.

Prints each step's loss as a hex float, then fingerprints of torch's CPU generator, Python's
``random`` and NumPy's states, the parameters and the forward calls
(tests/frameworks/test_fabric.py runs it bare and watched and compares)."""

import hashlib
import random

import numpy as np
import torch
import torch.nn as nn
from lightning.fabric import Fabric

FORWARDS = [0]


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inp, self.hidden, self.out = nn.Linear(16, 32), nn.Linear(32, 32), nn.Linear(32, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        FORWARDS[0] += 1
        return self.out(torch.relu(self.hidden(torch.relu(self.inp(x)))))


def fingerprint(model: nn.Module) -> str:
    h = hashlib.sha256()
    for _, tensor in sorted(model.state_dict().items()):
        h.update(tensor.detach().contiguous().numpy().tobytes())
    h.update(torch.get_rng_state().numpy().tobytes())
    h.update(repr(random.getstate()).encode())
    h.update(np.random.get_state()[1].tobytes())
    return h.hexdigest()[:16]


def main() -> None:
    fabric = Fabric(accelerator="cpu", devices=1)
    fabric.seed_everything(0, verbose=False)
    model = Net()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model, optimizer = fabric.setup(model, optimizer)
    for step in range(6):
        x = torch.randn(8, 16) + float(np.random.rand())
        y = torch.randn(8, 4) * random.random()
        loss = nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        fabric.backward(loss)
        optimizer.step()
        print(f"step {step} loss {loss.item().hex()}", flush=True)
    print(f"forwards {FORWARDS[0]} state {fingerprint(model)}", flush=True)


if __name__ == "__main__":
    main()
