"""What a memory plan says: the training it plans for, each device's bytes by kind and at each
moment of a step (MOMENTS), and a mode's plan (memory.py makes them; docs/compare.md explains)."""

from __future__ import annotations

from dataclasses import dataclass

FLOAT32 = 4
HALF = 2  # autocast's float16 or bfloat16
OPTIMIZERS = ("sgd", "adam")
# The moments the figures hold at (a plan's JSON carries them).
MOMENTS = {
    "at_rest": "after the optimizer step, until the next step's zero_grad: parameters, gradients, "
    "optimizer state and the buffers that stay (DDP's buckets)",
    "backward_begins": "the loss computed and its gradients made, every activation still held, no "
    "parameter's gradient yet (zero_grad set them to None), the buffers of the moment gathered",
    "unit_backward": "FSDP gathers a unit for its backward: its parameters, their unsharded gradients "
    "and the reduce-scatter's copy of them, while the logits' gradient is still held",
    "backward_ends": "every gradient made and the activations freed: the at-rest figure",
}


@dataclass(frozen=True)
class Training:
    optimizer: str = "sgd"
    amp: bool = False
    batch_size: int = 8  # the global batch, in sequences
    microbatches: int = 4  # pipeline
    schedule: str = "gpipe"  # pipeline: gpipe or 1f1b
    accum: int = 1  # micro-batches a step outside the pipeline: their gradients add up before backward ends


def byte_split(training: Training) -> dict[str, int]:
    """Bytes a parameter in torch's terms for ``training``: float32 weights (their own master copy
    under autocast), float32 gradients, the optimizer's buffers, and autocast's 16-bit copy of a
    matmul's weight, held from its forward to its backward."""
    return {
        "weights": FLOAT32,
        "gradients": FLOAT32,
        "optimizer": 2 * FLOAT32 if training.optimizer == "adam" else FLOAT32,
        "master_weights": 0,
        "amp_copy": HALF if training.amp else 0,
    }


@dataclass(frozen=True)
class DeviceMemory:
    device: str  # "rank 0", "GPU 1", "host"
    params: int
    grads: int
    optimizer: int
    activations: int
    buffers: int = 0
    gpu: bool = True  # host memory (hybrid's embedding) is not checked against the GPU
    amp_copies: int = 0  # autocast's 16-bit copies of the matmuls' weights, kept for backward
    loss_grads: int = 0  # as backward begins: the gradients of the loss's input (where the head is)
    resident: bool = False  # the buffers stay between steps (DDP's buckets); else only at the peak
    kept: int = 0  # of the buffers, what is held from forward to backward (resident ones: all)
    grads_at_peak: bool = False  # accumulation: the earlier micro-batches' gradients are held

    @property
    def state(self) -> int:
        """Parameters, gradients and optimizer state: what a rank holds from one step to the next."""
        return self.params + self.grads + self.optimizer

    @property
    def at_rest(self) -> int:
        """What the device holds after the optimizer step: the state and the buffers that stay."""
        return self.state + (self.buffers if self.resident else 0)

    @property
    def after_forward(self) -> int:
        """As the forward pass ends: no gradient yet (zero_grad set them to None; with accumulation,
        the earlier micro-batches'), every activation kept, the buffers kept until backward."""
        return self._during_step + self.activations + self._kept

    @property
    def backward_begins(self) -> int:
        """The loss's gradients made (of the log-probabilities and of the logits)."""
        return self.after_forward + self.loss_grads

    @property
    def unit_backward(self) -> int:
        """A unit's backward with all the buffers gathered, the logits' gradient still held."""
        return self._during_step + self.activations + self.loss_grads // 2 + self.buffers

    @property
    def _kept(self) -> int:
        return self.buffers if self.resident else self.kept

    @property
    def _during_step(self) -> int:
        held = self.grads if self.grads_at_peak else 0
        return self.params + held + self.optimizer + self.amp_copies

    @property
    def peak_moment(self) -> str:
        """When the device's peak comes (a key of MOMENTS)."""
        moments = {
            "backward_begins": self.backward_begins,
            "unit_backward": self.unit_backward,
            "backward_ends": self.at_rest,
        }
        return max(moments, key=moments.__getitem__)  # the first of equals

    @property
    def total(self) -> int:
        """The peak: the largest of the moments."""
        return max(self.backward_begins, self.unit_backward, self.at_rest)

    def to_json(self) -> dict:
        return {
            "device": self.device,
            "params": self.params,
            "grads": self.grads,
            "optimizer": self.optimizer,
            "activations": self.activations,
            "buffers": self.buffers,
            "amp_copies": self.amp_copies,
            "loss_grads": self.loss_grads,
            "state": self.state,
            "at_rest": self.at_rest,
            "after_forward": self.after_forward,
            "total": self.total,
            "peak_moment": self.peak_moment,
            "gpu": self.gpu,
        }


@dataclass(frozen=True)
class ModePlan:
    mode: str
    gpus: int  # GPUs the mode uses here
    devices: tuple[DeviceMemory, ...] = ()
    note: str | None = None  # why it cannot be planned, or what the figures assume
    fits: bool | None = None  # None: no GPU memory to compare with, or no plan

    @property
    def peak(self) -> int | None:
        totals = [d.total for d in self.devices if d.gpu]
        return max(totals) if totals else None

    def to_json(self) -> dict:
        return {
            "mode": self.mode,
            "gpus": self.gpus,
            "fits": self.fits,
            "peak_bytes": self.peak,
            "note": self.note,
            "devices": [d.to_json() for d in self.devices],
            "moments": MOMENTS,
        }
