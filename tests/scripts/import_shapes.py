"""A training loop that comes to torch in one of the shapes libraries use, before anything else
(``--shape``): ``find_spec`` (an availability check first, as transformers, accelerate, datasets
and evaluate make at their import), ``import_module`` (``importlib.import_module("torch")``),
``lazy`` (``importlib.util.LazyLoader``, as lazy-import helpers do), ``transformers``
(``import transformers`` first, as Hugging Face scripts begin), or ``plain``. Under torchrun
with more than one process it trains with DDP over gloo; otherwise alone. It knows nothing of
mgpu-tui, and prints its own account at the end:
    RESULT {"rank": 0, "world_size": 2, "steps": 5, "loss": 0.41}
"""

import importlib
import importlib.util
import json
import os
import sys

SHAPE = sys.argv[sys.argv.index("--shape") + 1] if "--shape" in sys.argv else "plain"
STEPS = 5

if SHAPE == "find_spec":
    assert importlib.util.find_spec("torch") is not None
    import torch
elif SHAPE == "import_module":
    torch = importlib.import_module("torch")
elif SHAPE == "lazy":
    spec = importlib.util.find_spec("torch")
    loader = importlib.util.LazyLoader(spec.loader)
    spec.loader = loader
    torch = importlib.util.module_from_spec(spec)
    sys.modules["torch"] = torch
    loader.exec_module(torch)  # torch's own code runs at the first attribute read below
elif SHAPE == "transformers":
    # isort: off
    import transformers  # noqa: F401 (it asks for torch's spec at its import)
    import torch

    # isort: on
else:
    import torch


def main():
    world = int(os.environ.get("WORLD_SIZE", "1"))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    if world > 1:
        torch.distributed.init_process_group("gloo")
        model = torch.nn.parallel.DistributedDataParallel(model)
    rank = torch.distributed.get_rank() if world > 1 else 0
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(rank)
    for _ in range(STEPS):
        x = torch.randn(4, 8, generator=g)
        loss = (model(x) - x.sum(1, keepdim=True)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print("RESULT " + json.dumps({"rank": rank, "world_size": world, "steps": STEPS, "loss": loss.item()}))
    if world > 1:
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
