"""The models every mode trains, and their data: each model a sequence of layers (the MLP here,
the GPT in transformer.py), the ways the modes cut it into stages or place its layers on devices,
and the learnable batches made from (seed, step). The demos reach all of it through harness.py.
"""

from __future__ import annotations

import argparse
import os
import time
from collections import OrderedDict

import torch
import torch.nn.functional as F
from torch import nn

from mgpu_tui.demos import faults
from mgpu_tui.engine.planning.placement import split_layers

CLASSES = 10


class Block(nn.Module):
    """A residual MLP block (x + fc2(gelu(fc1(x)))): the unit modes place on devices or shard.

    Two matrices, so tensor parallelism can split the first by columns and the
    second by rows, with one all-reduce per block.
    """

    tp_plan = {"fc1": "colwise", "fc2": "rowwise"}  # tensor parallelism (tp.py)

    def __init__(self, width: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(width, 2 * width)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(2 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(self.act(self.fc1(x)))


def build_model(args: argparse.Namespace) -> nn.Sequential:
    """The same weights on every rank and in every mode: they come from the seed alone.

    The MLP: layers 0..depth-1 are blocks, layer ``depth`` the classifier head. The GPT: layer 0
    the embeddings, then the blocks, then the head (transformer.py).
    """
    torch.manual_seed(args.seed)
    if args.shape is not None:
        from mgpu_tui.demos.transformer import build_gpt

        return build_gpt(args.shape)
    return nn.Sequential(*(Block(args.width) for _ in range(args.depth)), nn.Linear(args.width, CLASSES))


def n_layers(args: argparse.Namespace) -> int:
    """The model's layers, the units that modes place on devices, stage or shard."""
    return args.shape.layers + 2 if args.shape is not None else args.depth + 1


def loss(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """The mean cross-entropy: over samples for the MLP, over every token for the GPT."""
    return F.cross_entropy(output.reshape(-1, output.shape[-1]), target.reshape(-1))


class Stage(nn.Sequential):
    """Layers ``[first, last)`` of the model, with the weights and names they have in the whole model.

    Built from the arguments alone, so any process (a pipeline rank, an RPC worker)
    makes exactly its part of the same model, and its parameters are named as the
    baseline's ("2.fc1.weight"), so they compare by name.
    """

    def __init__(self, args: argparse.Namespace, first: int, last: int) -> None:
        model = build_model(args)
        super().__init__(OrderedDict((str(i), model[i]) for i in range(first, last)))


class Placed(nn.Sequential):
    """The model with each layer on its own device; the activations follow the layers.

    Parameter names stay those of the model, so a placed model compares with the baseline.
    """

    def __init__(self, model: nn.Sequential, layer_devices: list[torch.device]) -> None:
        super().__init__(OrderedDict(model.named_children()))
        self.layer_devices = layer_devices
        for layer, device in zip(self, layer_devices):
            layer.to(device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer, device in zip(self, self.layer_devices):
            x = layer(x.to(device))  # the hop between devices: a copy over PCIe or NVLink
        return x


class HostBoundary(nn.Sequential):
    """The model's layers computed on ``device``, taking and giving back host (CPU) tensors.

    For ranks that share a GPU (--share-gpus): they talk over gloo, and gloo cannot send a
    CUDA tensor point to point (its TCP transport reads the device pointer as host memory:
    "writev: Bad address", seen on an H100), so activations cross between ranks in host
    memory while the layers still run on the GPU. Parameter names stay those of the model.
    """

    def __init__(self, model: nn.Sequential, device: torch.device) -> None:
        super().__init__(OrderedDict(model.named_children()))
        self.compute_device = device
        self.to(device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x.to(self.compute_device)).cpu()


def layer_devices(stage_devices: list[str], n_layers: int) -> list[torch.device]:
    """Spread ``n_layers`` over the stages' devices in contiguous, balanced runs."""
    per_layer = []
    for device, layers in zip(stage_devices, split_layers(n_layers, len(stage_devices))):
        per_layer += [torch.device(device)] * len(layers)
    return per_layer


class SyntheticTask:
    """The data: learnable batches made from (seed, step). It also times itself: ``data_s`` is how
    long this rank spent on its latest batch, the "loading data" part of its step."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.seed = args.seed
        self.width = args.width
        teacher_rng = torch.Generator().manual_seed(args.seed + 1)
        self.teacher = torch.randn(args.width, CLASSES, generator=teacher_rng)
        self.tokens = None
        if args.shape is not None:
            from mgpu_tui.demos.transformer import TokenData

            self.tokens = TokenData(args.shape, args.seed)
        self.rank = int(os.environ.get("RANK", "0"))
        self.data_s: float | None = None

    def batch(self, step: int, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The global batch of ``step``: the same on every rank, in every mode."""
        started = time.perf_counter()
        faults.maybe_slow(self.args, step, self.rank)  # --fail-kind slow: a rank slow to load its data
        if self.tokens is not None:
            batch = self.tokens.batch(step, batch_size)
        else:
            rng = torch.Generator().manual_seed(self.seed * 1_000_003 + step)
            x = torch.randn(batch_size, self.width, generator=rng)
            batch = x, (x @ self.teacher).argmax(dim=1)
        self.data_s = time.perf_counter() - started
        return batch
