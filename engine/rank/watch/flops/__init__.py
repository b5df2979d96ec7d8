"""A training step's FLOPs, counted as the step the job really runs, never by running it again.

A dispatch mode over torch's FLOP formulas (``torch.utils.flop_counter``'s registry) is opened
around the root's forward and around ``backward()``, by the watch's own hooks and wrappers alone,
closed on every exception, once per input shape; the counts are kept and added up at each step
boundary. Nothing of the job runs more often than bare: no replay, no fake tensor, no second forward.

Read in this order: ``inputs.py`` (a forward's inputs reduced to a key, at every training forward),
``counter.py`` (the mode), ``compiled.py`` (compiled graphs inside an observed step: which are seen,
which declare their FLOPs, which cannot be counted), ``declared.py`` (an inductor graph's FLOPs from
its post-grad text), ``step_flops.py`` (one rank's count: the windows, the keys, every failure told
as a reason, never raised into the script).

The count is what the rank computes: a DTensor's or FSDP's local operations, a ZeRO-3 layer's
gathered parameters, the loss's backward. The loss function's forward outside the root is not
counted (a few elementwise passes). The formulas torch lacks (the CPU's fused attention) are
registered, the same as torch's own for the GPU kernels. These modules receive the torch module and
reach torch's parts only while they count: in a rank, where the script has imported torch.
"""

from mgpu_tui.engine.rank.watch.flops.compiled import backends_in_use, install_inductor
from mgpu_tui.engine.rank.watch.flops.counter import register_missing_formulas, sees_compiled_graphs
from mgpu_tui.engine.rank.watch.flops.declared import declared_flops
from mgpu_tui.engine.rank.watch.flops.inputs import Call, describe
from mgpu_tui.engine.rank.watch.flops.step_flops import (
    MAX_FORWARDS,
    MAX_SHAPES,
    OFF,
    Counted,
    StepFlops,
    precision,
    precision_name,
)

__all__ = [
    "MAX_FORWARDS",
    "MAX_SHAPES",
    "OFF",
    "Call",
    "Counted",
    "StepFlops",
    "backends_in_use",
    "declared_flops",
    "describe",
    "install_inductor",
    "precision",
    "precision_name",
    "register_missing_formulas",
    "sees_compiled_graphs",
]
