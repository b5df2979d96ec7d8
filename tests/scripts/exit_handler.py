"""A job of one process that ends its process group in its own exit handler, as a framework may
(``atexit.register(dist.destroy_process_group)``). It knows nothing of mgpu-tui. In that handler it
prints the threads the process still has, then the group is destroyed:
    AT EXIT ["MainThread"]
    RESULT {"rank": 0, "world_size": 1, "steps": 6, "loss": 0.1}
"""

import atexit
import json
import sys
import tempfile
import threading

import torch
import torch.distributed as dist


def at_exit():
    names = sorted(t.name for t in threading.enumerate())
    sys.stdout.write(f"AT EXIT {json.dumps(names)}\n")
    sys.stdout.flush()
    dist.destroy_process_group()


def main():
    store = tempfile.NamedTemporaryFile(prefix="exit_handler_store_", delete=False).name
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    atexit.register(at_exit)
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(4, 8), torch.randn(4, 1)
    for _ in range(6):
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
        optimizer.step()
    result = {"rank": 0, "world_size": 1, "steps": 6, "loss": loss.item()}
    sys.stdout.write(f"RESULT {json.dumps(result)}\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
