"""A small job that knows nothing of mgpu-tui, in one of the shapes in which the old FLOP count
(a replay of the forward on fake and meta tensors) changed what the job does
(tests/integration/test_watch_invisible.py runs each bare and watched and compares everything the job
observes). ``--shape``:

- kept_output: its forward keeps ``self.last = out.detach()``, read after each step (``.item()``);
- python_random: its forward drops a layer by Python's ``random`` (LayerDrop) and counts its calls;
- host_noise: its forward adds ``torch.randn(x.shape).to(x.device)``: the CPU generator's draws;
- batchnorm: BatchNorm with ``momentum=None`` (a cumulative average): its buffers, its eval output;
- grad_hook: a gradient hook on every parameter collects the norms, read with ``.item()``;
- host_all_reduce: two ranks (mp.spawn, gloo) whose forward all-reduces a tensor made on the host
  (the batch's size: a loss over the global batch), rank 1 with a ragged last batch;
- after_training: after training, the model is scripted, traced, exported (strict and not),
  symbolically traced, exported to ONNX (where onnx installs), saved, deep-copied and pickled, in
  train and in eval mode.

Everything it observes goes to its stdout (losses as hex floats), and at its end the fingerprints of
torch's CPU generator, Python's ``random`` and NumPy's states, its parameters and buffers, and its
forward calls; rank 0 saves its state_dict to ``model.pt``.
"""

import argparse
import copy
import gc
import hashlib
import io
import pickle
import random
import re
import socket
import sys
import weakref

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn

parser = argparse.ArgumentParser()
parser.add_argument("--shape", required=True)
parser.add_argument("--steps", type=int, default=8)
args = parser.parse_args()
FORWARDS = [0]


class Net(nn.Module):
    def __init__(self, shape: str) -> None:
        super().__init__()
        self.shape = shape
        self.inp = nn.Linear(16, 32)
        self.norm = nn.BatchNorm1d(32, momentum=None) if shape == "batchnorm" else nn.Identity()
        self.blocks = nn.ModuleList(nn.Linear(32, 32) for _ in range(3))
        self.out = nn.Linear(32, 4)
        self.last = torch.zeros(())

    def forward(self, x):
        FORWARDS[0] += 1
        if self.shape == "host_noise":
            x = x + 0.01 * torch.randn(x.shape).to(x.device)
        h = torch.relu(self.norm(self.inp(x)))
        for block in self.blocks:
            if self.shape == "python_random" and self.training and random.random() < 0.3:
                continue  # LayerDrop
            h = torch.relu(block(h))
        out = self.out(h)
        if self.shape == "kept_output":
            self.last = out.detach()
        if self.shape == "host_all_reduce" and self.training:
            total = torch.tensor([float(x.shape[0])])
            dist.all_reduce(total)  # the global batch
            out = out * (x.shape[0] / total)
        return out


class Plain(nn.Module):
    """after_training's model: one TorchScript can compile (no Python state in its forward)."""

    def __init__(self) -> None:
        super().__init__()
        self.inp, self.hidden, self.out = nn.Linear(16, 32), nn.Linear(32, 32), nn.Linear(32, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.relu(self.hidden(torch.relu(self.inp(x)))))


def digest(*parts) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part if isinstance(part, bytes) else repr(part).encode())
    return h.hexdigest()[:16]


def state_of(model: nn.Module) -> str:
    tensors = [(n, t.detach().contiguous().numpy().tobytes()) for n, t in model.state_dict().items()]
    rng = torch.get_rng_state().numpy().tobytes()
    numpy_state = np.random.get_state()
    return digest(rng, random.getstate(), numpy_state[1].tobytes(), numpy_state[2:], *tensors)


def train(model: nn.Module, rank: int = 0) -> None:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    norms: list = []
    if args.shape == "grad_hook":
        for p in model.parameters():
            p.register_hook(lambda g: norms.append(g.norm()))
    inputs = []  # each step's input, weakly: none is alive once the loop let go of it (the watch read
    for step in range(args.steps):  # these frames' locals at step 1: it must not keep them alive)
        batch = 8 if args.shape != "host_all_reduce" or rank == 0 or step < args.steps - 1 else 5
        x = torch.randn(batch, 16) + float(np.random.rand())
        inputs.append(weakref.ref(x))
        y = torch.randn(batch, 4)
        if isinstance(model, Plain):
            FORWARDS[0] += 1  # its forward keeps no count of its own
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        line = f"step {step} loss {loss.item().hex()}"
        if args.shape == "kept_output":
            line += f" last {model.last.sum().item().hex()}"
        if args.shape == "grad_hook":
            line += f" norms {sum(n.item() for n in norms).hex()}"
            norms.clear()
        if rank == 0:
            print(line, flush=True)
    del x, y, loss
    gc.collect()
    if rank == 0:
        print(f"inputs alive {sum(ref() is not None for ref in inputs)}", flush=True)


def outcome(what: str, make) -> None:
    """What one way of making something of the model gives: its output's digest, or its error."""
    try:
        out = make()
        told = digest(out.detach().numpy().tobytes()) if isinstance(out, torch.Tensor) else digest(out)
    except Exception as exc:  # noqa: BLE001 (what the job sees is the point)
        first = str(exc).splitlines()[0][:200] if str(exc) else ""
        told = f"{type(exc).__name__}: {re.sub('0x[0-9a-f]+', '0x...', first)}"  # no address
    print(f"{what}: {told}", flush=True)


def after_training(model: nn.Module) -> None:
    x = torch.randn(4, 16)
    for mode in ("train", "eval"):
        model.train(mode == "train")
        outcome(f"{mode} jit.script", lambda: torch.jit.script(model)(x))
        outcome(f"{mode} jit.trace", lambda: torch.jit.trace(model, (x,))(x))
        outcome(f"{mode} jit.trace code", lambda: torch.jit.trace(model, (x,)).code)
        outcome(f"{mode} export strict", lambda: torch.export.export(model, (x,), strict=True).module()(x))
        outcome(f"{mode} export", lambda: torch.export.export(model, (x,)).module()(x))
        outcome(f"{mode} export graph", lambda: str(torch.export.export(model, (x,)).graph))
        outcome(f"{mode} fx.symbolic_trace", lambda: torch.fx.symbolic_trace(model)(x))
        outcome(f"{mode} fx code", lambda: torch.fx.symbolic_trace(model).code)
        outcome(f"{mode} onnx", lambda: onnx_export(model, x))
        outcome(f"{mode} torch.save", lambda: saved(model, x))
        outcome(f"{mode} torch.save hooks", lambda: hooks_of(saved_model(model)))
        outcome(f"{mode} deepcopy", lambda: copy.deepcopy(model)(x))
        outcome(f"{mode} deepcopy hooks", lambda: hooks_of(copy.deepcopy(model)))
        outcome(f"{mode} pickle", lambda: pickle.loads(pickle.dumps(model))(x))
        outcome(f"{mode} pickle hooks", lambda: hooks_of(pickle.loads(pickle.dumps(model))))


def hooks_of(model: nn.Module) -> dict:
    """Its hook tables' lengths, by name (a pickled tensor names its storage by address: no bytes)."""
    return {k: len(v) for k, v in vars(model).items() if "hook" in k and isinstance(v, dict) and v}


def onnx_export(model: nn.Module, x: torch.Tensor) -> str:
    try:
        import onnx  # noqa: F401
        import onnxscript  # noqa: F401
    except ImportError:
        return "onnx is not installed"
    buffer = io.BytesIO()
    torch.onnx.export(model, (x,), buffer, dynamo=True)
    return digest(buffer.getvalue())  # the same bytes, run after run


def saved(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return saved_model(model)(x)


def saved_model(model: nn.Module) -> nn.Module:
    buffer = io.BytesIO()
    torch.save(model, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=False)


def seeded_model() -> nn.Module:
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    return Plain() if args.shape == "after_training" else Net(args.shape)


def rank_main(rank: int, port: int) -> None:  # host_all_reduce's ranks
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    model = seeded_model()
    torch.manual_seed(rank)
    train(model, rank)
    if rank == 0:
        finish(model)
    dist.destroy_process_group()


def finish(model: nn.Module) -> None:
    if args.shape == "after_training":
        after_training(model)
    model.eval()
    with torch.no_grad():
        print(f"eval {digest(model(torch.ones(3, 16)).numpy().tobytes())}")
    print(f"forwards {FORWARDS[0]}")
    print(f"state {state_of(model)}")
    torch.save(model.state_dict(), "model.pt")


if __name__ == "__main__":
    if args.shape == "host_all_reduce":
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            free = s.getsockname()[1]
        torch.multiprocessing.spawn(rank_main, args=(free,), nprocs=2)
    else:
        model = seeded_model()
        train(model)
        finish(model)
    print("done", file=sys.stderr)
