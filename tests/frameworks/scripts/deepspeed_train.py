"""A DeepSpeed training script in the shape of its getting-started guide: deepspeed.initialize
with a config dict, ``model_engine(x)``, ``model_engine.backward(loss)``, ``model_engine.step()``;
launched by the ``deepspeed`` launcher. It knows nothing of mgpu-tui. Each rank prints:
    RESULT {"rank": 0, "world_size": 2, "steps": 8, "batch": 4, "loss": 0.1}
"""

import argparse
import json
import sys

import deepspeed
import torch
import torch.nn.functional as F

BATCH, STEPS = 4, 8


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--local_rank", type=int, default=-1)  # the launcher passes it
    parser.add_argument("--optimizer", default="SGD")
    parser.add_argument("--zero-stage", type=int, default=None)  # ZeRO's stage, where one is asked for
    args = parser.parse_args()
    deepspeed.init_distributed(dist_backend="gloo")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    config = {
        "train_micro_batch_size_per_gpu": BATCH,
        "gradient_accumulation_steps": 1,
        "optimizer": {"type": args.optimizer, "params": {"lr": 0.05}},
    }
    if args.zero_stage is not None:
        config["zero_optimization"] = {"stage": args.zero_stage}
        config["zero_allow_untested_optimizer"] = True  # torch's SGD under ZeRO
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
    rank = torch.distributed.get_rank()
    g = torch.Generator().manual_seed(rank)
    loss = None
    for _ in range(STEPS):
        x = torch.randn(BATCH, 16, generator=g)
        loss = F.mse_loss(engine(x), x.sum(dim=1, keepdim=True) * 0.1)
        engine.backward(loss)
        engine.step()
    result = {
        "rank": rank,
        "world_size": torch.distributed.get_world_size(),
        "steps": STEPS,
        "batch": BATCH,
        "loss": loss.item(),
    }
    sys.stdout.write(f"RESULT {json.dumps(result)}\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
