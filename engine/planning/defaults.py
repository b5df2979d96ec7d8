"""The defaults of a launch, in one place: the spec, the command line, its help, the app's
forms and the demos all read them from here, so they cannot drift apart."""

from __future__ import annotations


class Defaults:
    """Read-only by convention. A plain class: `mgpu-tui --help` reads it, and dataclasses would
    cost that command 8 ms of imports (inspect, ast, dis), a fifth of its start-up."""

    __slots__ = ()
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
    join_timeout: float = 600.0  # several nodes: seconds to wait for all to join (torchrun's default)
    cpu_ranks_per_core: int = 4  # more CPU ranks than this per core only fight over them (--force)
    # exec: seconds between the signal that stops a job (Ctrl-C, SIGTERM) and SIGKILL, as torchrun's
    # --shutdown-timeout, Slurm's KillWait and Kubernetes' grace period give a job by default
    stop_grace: float = 30.0


DEFAULTS = Defaults()
# How the learning rate follows a larger global batch (engine/compare/scaling.py), the first the default.
LR_RULES = ("linear", "sqrt", "none")
