"""A one-process training loop with no DDP, in the two shapes of the seed how-tos: a plain model
on one device (token ids in, a tiny language model), or the same model in ``nn.DataParallel``
(--data-parallel), which spreads a batch over the GPUs it sees and on a machine without one runs
the model as it is. It knows nothing of mgpu-tui. It prints its own account at the end:
    RESULT {"rank": 0, "world_size": 1, "steps": 12, "batch": 8, "seq": 16, "loss": 4.1}
"""

import argparse
import json
import sys

import torch
import torch.nn as nn


class TinyLM(nn.Module):
    def __init__(self, vocab=64, dim=32):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.mix = nn.Linear(dim, dim)
        self.head = nn.Linear(dim, vocab)

    def forward(self, ids):
        return self.head(torch.relu(self.mix(self.embed(ids))))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=16)
    parser.add_argument("--data-parallel", action="store_true")
    args = parser.parse_args()
    torch.manual_seed(0)
    model = TinyLM()
    if args.data_parallel:
        model = nn.DataParallel(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(0)
    loss = None
    for _ in range(args.steps):
        ids = torch.randint(0, 64, (args.batch, args.seq + 1), generator=g)
        logits = model(ids[:, :-1])
        loss = nn.functional.cross_entropy(logits.reshape(-1, 64), ids[:, 1:].reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    result = {
        "rank": 0,
        "world_size": 1,
        "steps": args.steps,
        "batch": args.batch,
        "seq": args.seq,
        "loss": loss.item(),
    }
    sys.stdout.write(f"RESULT {json.dumps(result)}\n")


if __name__ == "__main__":
    main()
