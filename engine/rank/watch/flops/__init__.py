"""A training step's FLOPs, counted by torch's own FLOP counter, for any model.

A step is never counted while it runs: Dynamo will not compile under a dispatch mode such as the
counter, and marks the frame to be skipped for good (a compiled model then ran eager on most
steps). The step is *replayed* instead, at a step boundary, once per input shape:

- on the eager module inside the wrappers (DistributedDataParallel's ``.module``, DataParallel's,
  torch.compile's ``_orig_mod``, a DeepSpeed engine's ``.module``), so no collective is issued and
  nothing is compiled;
- with tensors of the shapes, dtypes and devices the root's forward was called with, under
  ``torch.compiler.set_stance("force_eager")`` and the autocast the forward ran under;
- forward, then ``torch.autograd.grad`` of every output that needs a gradient with respect to the
  parameters (never ``backward()``, which would store gradients in the real ``.grad``);
- a block that repeats (a deep model's layers) once per input signature, its FLOPs added for each
  of its calls: the count costs what one layer costs, not what all do.

Read in this order: ``inputs.py`` (a forward's inputs reduced, at every training forward),
``replay.py`` (the fake replay, the reference), ``twins.py`` (repeated blocks), ``on_meta.py`` (the
same replay on meta tensors, kept where it agrees), ``step_flops.py`` (one rank's count, which replay
for which shape, and every failure told as a reason).

The loss function outside the model is not counted (a cross-entropy is a few elementwise passes).
FSDP's modules hold shards: their step is n/a, with the reason. The formulas torch lacks (the CPU's
fused attention) are registered, the same as torch's own for the GPU kernels. These modules receive
the torch module and reach torch's parts only while they count: in a rank, where the script has
imported torch.
"""

from mgpu_tui.engine.rank.watch.flops.inputs import Call, describe
from mgpu_tui.engine.rank.watch.flops.on_meta import NotOnMeta, count_on_meta
from mgpu_tui.engine.rank.watch.flops.replay import NotCounted, count, eager_module, register_missing_formulas
from mgpu_tui.engine.rank.watch.flops.step_flops import (
    MAX_FORWARDS,
    MAX_SHAPES,
    OFF,
    StepFlops,
    precision,
    precision_name,
)

__all__ = [
    "MAX_FORWARDS",
    "MAX_SHAPES",
    "OFF",
    "Call",
    "NotCounted",
    "NotOnMeta",
    "StepFlops",
    "count",
    "count_on_meta",
    "describe",
    "eager_module",
    "precision",
    "precision_name",
    "register_missing_formulas",
]
