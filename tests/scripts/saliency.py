"""Backward passes without an optimizer step: the gradient of a model's output with respect to its
input (a saliency map), CALLS times over one graph kept for them (``retain_graph``: cheap enough
for a test; adversarial examples and influence scores have the same shape: backward, no step).
Then one optimizer step, so that a watch that counts steps shows it saw the job. It knows nothing
of mgpu-tui. It prints its own account, its resident memory after the first tenth of the calls
and at the end:
    RESULT {"rank": 0, "calls": 200000, "rss_early": 300000000, "rss_late": 300100000, "loss": 0.5}
"""

import argparse
import json
import os
import sys

import torch
import torch.nn as nn


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=200_000)
    args = parser.parse_args()
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    x = torch.randn(1, 4, requires_grad=True)
    early = None
    output = model(x).sum()
    for call in range(1, args.calls + 1):
        output.backward(retain_graph=True)  # the gradient of the output with respect to the input
        x.grad = None
        if call == args.calls // 10:
            early = rss()
    late = rss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loss = model(x).pow(2).sum()
    loss.backward()
    optimizer.step()
    result = {"rank": 0, "calls": args.calls, "rss_early": early, "rss_late": late, "loss": loss.item()}
    sys.stdout.write(f"RESULT {json.dumps(result)}\n")
