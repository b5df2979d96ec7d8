"""The defaults of a launch, in one place: the spec, the command line, its help, the app's
forms and the demos all read them from here, so they cannot drift apart."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Defaults:
    steps: int = 100  # optimizer steps
    batch_size: int = 64  # the global batch, every rank together
    lr: float = 0.02  # SGD learning rate (momentum 0.9)
    seed: int = 0  # weights and data
    width: int = 256  # the demo model's hidden width
    depth: int = 4  # its residual blocks (the model has depth + 1 layers with the head)
    accum: int = 1  # micro-batches per optimizer step
    stages: int = 2  # mp: the GPUs the model spreads over
    microbatches: int = 4  # pipeline: micro-batches in flight per step
    cpu_ranks: int = 2  # ranks of a multi-process mode on the CPU (on CUDA: one per GPU)


DEFAULTS = Defaults()
