"""A small GPT trained the way most single-file GPT training scripts are written: DDP from
torchrun's environment, gradient accumulation with the gradient sync only on the last micro-step,
AdamW with weight decay on the matrices, a cosine learning rate with warm-up, autocast and a
GradScaler, periodic evaluation on a held-out split, a checkpoint from the master process,
optional torch.compile, an "iter N: loss X, time Y ms" log line (with the allocator's peak on a GPU),
and its size in flags (--n-layer, --n-embd, --n-head: a step worth timing on a GPU).

It knows nothing of mgpu-tui (tests/frameworks/test_unchanged_scripts.py runs it unchanged). The
last few flags make it misbehave on purpose, as real jobs do: a rank that hangs or is slow in its
data loading, a long evaluation, an abort while the interpreter shuts down.
"""

import argparse
import atexit
import math
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed import destroy_process_group, init_process_group
from torch.nn.parallel import DistributedDataParallel as DDP

parser = argparse.ArgumentParser()
parser.add_argument("--max-iters", type=int, default=40)
parser.add_argument("--batch-size", type=int, default=4)
parser.add_argument("--block-size", type=int, default=32)
parser.add_argument("--grad-accum", type=int, default=4)
parser.add_argument("--eval-interval", type=int, default=20)
parser.add_argument("--eval-iters", type=int, default=4)
parser.add_argument("--lr", type=float, default=3e-3)
parser.add_argument("--n-layer", type=int, default=2)
parser.add_argument("--n-embd", type=int, default=64)
parser.add_argument("--n-head", type=int, default=4)
parser.add_argument("--tie-head", action="store_true", help="the head is the token embeddings (nanoGPT's)")
parser.add_argument("--compile", action="store_true")
parser.add_argument("--compile-backend", default="inductor")
parser.add_argument("--out-dir", default="out")
parser.add_argument("--backend", default=None, help="default: nccl with CUDA, else gloo")
parser.add_argument("--hang-rank", type=int, default=-1, help="this rank blocks in get_batch ...")
parser.add_argument("--hang-at", type=int, default=20, help="... from this iteration on")
parser.add_argument("--slow-rank", type=int, default=-1, help="this rank's data loading is slow ...")
parser.add_argument("--slow-ms", type=float, default=50.0, help="... by this much a batch")
parser.add_argument("--eval-seconds", type=float, default=0.0, help="evaluate this long at eval time")
parser.add_argument("--peak-flops", type=float, default=312e12, help="for the MFU estimate (nanoGPT's: A100)")
parser.add_argument("--abort-at-exit", type=int, default=-1, help="this rank aborts as Python shuts down")
args = parser.parse_args()


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        n = x.size(1)
        mask = torch.triu(torch.ones(n, n, dtype=torch.bool, device=x.device), diagonal=1)
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab=256, block=32, d=64, heads=4, layers=2, tie=False):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(block, d)
        self.blocks = nn.Sequential(*[Block(d, heads) for _ in range(layers)])
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)
        if tie:
            self.head.weight = self.tok.weight  # weight tying, as nanoGPT's GPT does

    def forward(self, idx, targets=None):
        pos = torch.arange(idx.size(1), device=idx.device)
        x = self.blocks(self.tok(idx) + self.pos(pos))
        logits = self.head(self.ln(x))
        if targets is None:
            return logits, None
        return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def estimate_flops(model, fwdbwd_per_iter):
    """nanoGPT's estimate of an iteration's FLOPs (its model.py, estimate_mfu, after PaLM's appendix
    B): 6N + 12 L H Q T a token, N the parameters without the position embeddings."""
    n = sum(p.numel() for p in model.parameters()) - model.pos.weight.numel()
    layers, d, t = len(model.blocks), model.tok.embedding_dim, args.block_size
    flops_per_token = 6 * n + 12 * layers * d * t
    return flops_per_token * t * fwdbwd_per_iter


def estimate_mfu(model, fwdbwd_per_iter, dt):
    """nanoGPT's MFU: its estimate of the FLOPs over the seconds, against --peak-flops."""
    return estimate_flops(model, fwdbwd_per_iter) / dt / args.peak_flops


ddp = int(os.environ.get("RANK", -1)) != -1
if ddp:
    backend = args.backend or ("nccl" if torch.cuda.is_available() else "gloo")
    init_process_group(backend=backend)
    rank, local_rank = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    world = int(os.environ["WORLD_SIZE"])
    device = f"cuda:{local_rank}" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda"):
        torch.cuda.set_device(device)
    master = rank == 0
    assert args.grad_accum % world == 0
    grad_accum = args.grad_accum // world
else:
    rank, world, master, grad_accum = 0, 1, True, args.grad_accum
    device = "cuda" if torch.cuda.is_available() else "cpu"
device_type = "cuda" if device.startswith("cuda") else "cpu"
dtype = torch.bfloat16 if device_type == "cuda" and torch.cuda.is_bf16_supported() else torch.float32
ctx = torch.autocast(device_type=device_type, dtype=dtype, enabled=dtype != torch.float32)
torch.manual_seed(1337 + rank)

data = torch.randint(0, 256, (20_000,), generator=torch.Generator().manual_seed(0))
splits = {"train": data[:18_000], "val": data[18_000:]}


def get_batch(split, it=0):
    if rank == args.hang_rank and it >= args.hang_at:
        while True:  # a data loader that never delivers (a dead worker, a lost file system)
            time.sleep(3600)
    if rank == args.slow_rank:
        time.sleep(args.slow_ms / 1000)
    source = splits[split]
    starts = torch.randint(len(source) - args.block_size - 1, (args.batch_size,))
    x = torch.stack([source[i : i + args.block_size] for i in starts])
    y = torch.stack([source[i + 1 : i + 1 + args.block_size] for i in starts])
    return x.to(device), y.to(device)


model = GPT(block=args.block_size, d=args.n_embd, heads=args.n_head, layers=args.n_layer, tie=args.tie_head)
model = model.to(device)
decay = [p for p in model.parameters() if p.dim() >= 2]
no_decay = [p for p in model.parameters() if p.dim() < 2]
groups = [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}]
optimizer = torch.optim.AdamW(groups, lr=args.lr, betas=(0.9, 0.95))
scaler = torch.amp.GradScaler(device_type, enabled=dtype == torch.float16)
if args.compile:
    model = torch.compile(model, backend=args.compile_backend)
if ddp:
    model = DDP(model, device_ids=[local_rank] if device_type == "cuda" else None)
raw_model = model.module if ddp else model


def lr_at(it, warmup=5):
    if it < warmup:
        return args.lr * (it + 1) / warmup
    progress = (it - warmup) / max(1, args.max_iters - warmup)
    return args.lr * 0.1 + 0.5 * (1 + math.cos(math.pi * progress)) * args.lr * 0.9


@torch.no_grad()
def estimate_loss():
    out = {}
    model.eval()
    until = time.time() + args.eval_seconds
    for split in ("train", "val"):
        losses = []
        while len(losses) < args.eval_iters or time.time() < until:
            x, y = get_batch(split)
            with ctx:
                _, loss = model(x, y)
            losses.append(loss.item())
        out[split] = sum(losses) / len(losses)
    model.train()
    return out


if rank == args.abort_at_exit:
    # What gloo's teardown race does to about 1 run in 5, as late in the teardown as it comes: after
    # the peers have ended (an abort at once could end a peer still closing, under load, before it
    # has said it finished; CI saw that once).
    atexit.register(lambda: (time.sleep(2), os.abort()))

os.makedirs(args.out_dir, exist_ok=True)
x, y = get_batch("train")
t0 = time.time()
for it in range(args.max_iters + 1):
    for group in optimizer.param_groups:
        group["lr"] = lr_at(it)
    if it % args.eval_interval == 0 and it > 0:
        losses = estimate_loss()
        if master:
            print(f"step {it}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}", flush=True)
            torch.save({"model": raw_model.state_dict(), "iter": it}, os.path.join(args.out_dir, "ckpt.pt"))
    if it == args.max_iters:
        break
    for micro_step in range(grad_accum):
        if ddp:
            model.require_backward_grad_sync = micro_step == grad_accum - 1
        with ctx:
            _, loss = model(x, y)
            loss = loss / grad_accum
        x, y = get_batch("train", it)
        scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    t1 = time.time()
    if master:
        mem = f", mem {torch.cuda.max_memory_allocated() / 2**20:.1f}MiB" if device_type == "cuda" else ""
        lossf = loss.item() * grad_accum
        mfu = estimate_mfu(raw_model, args.batch_size * grad_accum, t1 - t0)
        print(
            f"iter {it}: loss {lossf:.4f}, time {(t1 - t0) * 1000:.2f}ms{mem}, mfu {mfu * 100:.2f}%",
            flush=True,
        )
    t0 = t1

if master:
    estimate = estimate_flops(raw_model, args.batch_size * grad_accum)
    print(f'RESULT {{"rank": {rank}, "estimate_flops_per_iter": {estimate}}}', flush=True)
if ddp:
    destroy_process_group()
