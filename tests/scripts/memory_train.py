"""A training loop whose memory the tests take apart (tests/integration/test_memory_parts.py). It
knows nothing of mgpu-tui. A tiny language model (its head tied to its embedding with --tie), one
process, or DDP when torchrun started it (RANK set). It prints its own account of what it holds at
its last step's end, each figure counted as numel x element size over its own objects:
    RESULT {"rank": 0, "parameters": ..., "buffers": ..., "gradients": ..., "optimizer": ...}
--leak keeps each step's loss, its graph with it, in a list (the classic leak). --limit-mb M sets
RLIMIT_AS to its address space before training and M MiB more (--limit-bytes: that limit itself),
and says it (LIMIT n, on stderr); --accum k accumulates k micro-batches a step; --bf16 trains
under CPU autocast in bfloat16. --saved counts, each step, the bytes of the tensors its model's
forward saved for backward, walking its output's graph (each storage once, the parameters' left
out), and says them (SAVED {"step": n, "bytes": b}, on stderr).
"""

import argparse
import contextlib
import json
import os
import resource
import sys

import torch
import torch.nn as nn

OPTIMIZERS = {
    "adam": lambda p: torch.optim.Adam(p, lr=1e-3),
    "adamw": lambda p: torch.optim.AdamW(p, lr=1e-3),
    "sgd": lambda p: torch.optim.SGD(p, lr=1e-2),
    "sgd-momentum": lambda p: torch.optim.SGD(p, lr=1e-2, momentum=0.9),
}


class TinyLM(nn.Module):
    def __init__(self, vocab: int, dim: int, tie: bool) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.mix = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.register_buffer("scale", torch.ones(dim))
        if tie:
            self.head.weight = self.embed.weight

    def forward(self, ids):
        x = self.embed(ids) * self.scale
        return self.head(self.norm(x + self.mix(x)))


def nbytes(t) -> int:
    return t.numel() * t.element_size()


def account(model: nn.Module, optimizer) -> dict:
    """What it holds, counted over its own objects (a tied weight is one parameter in parameters())."""
    params = list(model.parameters())
    state = [v for s in optimizer.state.values() for v in s.values() if torch.is_tensor(v)]
    return {
        "parameters": sum(nbytes(p) for p in params),
        "buffers": sum(nbytes(b) for b in model.buffers()),
        "gradients": sum(nbytes(p.grad) for p in params if p.grad is not None),
        "optimizer": sum(nbytes(v) for v in state),
    }


def saved_bytes(output, model: nn.Module) -> int:
    """The bytes autograd saved for backward in the graph that made ``output``: every node's
    ``_saved_*`` tensors, each storage once, the model's parameters and buffers left out."""
    params = {t.untyped_storage().data_ptr() for t in (*model.parameters(), *model.buffers())}
    seen, total, nodes, stack = set(), 0, set(), [output.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or node in nodes:
            continue
        nodes.add(node)
        for name in dir(node):
            if not name.startswith("_saved_"):
                continue
            values = getattr(node, name)
            for value in values if isinstance(values, tuple) else (values,):
                if torch.is_tensor(value):
                    key = value.untyped_storage().data_ptr()
                    if key not in params and key not in seen:
                        seen.add(key)
                        total += value.untyped_storage().nbytes()
        stack.extend(next_node for next_node, _ in node.next_functions)
    return total


def limit(args) -> None:
    """RLIMIT_AS: the address space now and --limit-mb more, or --limit-bytes."""
    if args.limit_mb is None and args.limit_bytes is None:
        return
    with open("/proc/self/status") as f:
        size = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
    bytes_ = args.limit_bytes if args.limit_bytes is not None else size + (args.limit_mb << 20)
    resource.setrlimit(resource.RLIMIT_AS, (bytes_, resource.RLIM_INFINITY))
    sys.stderr.write(f"LIMIT {bytes_}\n")
    sys.stderr.flush()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=16)
    parser.add_argument("--vocab", type=int, default=96)
    parser.add_argument("--dim", type=int, default=32)
    parser.add_argument("--optimizer", choices=OPTIMIZERS, default="adamw")
    parser.add_argument("--tie", action="store_true")
    parser.add_argument("--leak", action="store_true")
    parser.add_argument("--limit-mb", type=int)
    parser.add_argument("--limit-bytes", type=int)
    parser.add_argument("--accum", type=int, default=1)
    parser.add_argument("--bf16", action="store_true")
    parser.add_argument("--saved", action="store_true")
    args = parser.parse_args()
    ddp = "RANK" in os.environ
    if ddp:
        torch.distributed.init_process_group("gloo")
    rank = torch.distributed.get_rank() if ddp else 0
    torch.manual_seed(0)
    model = TinyLM(args.vocab, args.dim, args.tie)
    trained = nn.parallel.DistributedDataParallel(model) if ddp else model
    optimizer = OPTIMIZERS[args.optimizer](trained.parameters())
    g = torch.Generator().manual_seed(rank)
    kept = []
    limit(args)
    for step in range(args.steps):
        optimizer.zero_grad(set_to_none=True)
        for _ in range(args.accum):
            ids = torch.randint(0, args.vocab, (args.batch, args.seq + 1), generator=g)
            autocast = torch.autocast("cpu", dtype=torch.bfloat16) if args.bf16 else contextlib.nullcontext()
            with autocast:
                logits = trained(ids[:, :-1])
                if args.saved:
                    counted = {"step": step + 1, "bytes": saved_bytes(logits, model)}
                    sys.stderr.write(f"SAVED {json.dumps(counted)}\n")
                loss = nn.functional.cross_entropy(logits.reshape(-1, args.vocab), ids[:, 1:].reshape(-1))
            (loss / args.accum if args.accum > 1 else loss).backward()
        optimizer.step()
        if args.leak:
            kept.append(loss)  # the leak: each step's loss, and with it its graph
    result = {"rank": rank, "loss": loss.item(), **account(model, optimizer)}
    sys.stdout.write(f"RESULT {json.dumps(result)}\n")
    if ddp:
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
