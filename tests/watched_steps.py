"""A model stepped as a rank steps it, its FLOPs counted by the watch's own code (flops/, and
model_root's hooks); torch's FlopCounterMode on a step, the independent count tests hold it to.
Shared by tests/unit/test_flop_count.py and tests/frameworks/test_flops.py."""

import torch
from torch.utils.flop_counter import FlopCounterMode

from mgpu_tui.engine.rank.watch import flops, wrapping
from mgpu_tui.engine.rank.watch.model_root import HookedRoot
from mgpu_tui.engine.rank.watch.step_clock import StepClock


def square_mean(out):
    return out.float().square().mean()


class Watched:
    """A model with the watch's own root hooks (model_root.HookedRoot) and a StepFlops, stepped as
    a rank steps it: the forward through its hooks, backward() inside the count's window."""

    def __init__(self, model) -> None:
        self.model, self.counted = model, flops.StepFlops(torch)
        root = HookedRoot(self._before, StepClock(), self.counted.forward_ends)
        root.torch = torch
        root.hook(model, "the model")

    def _before(self, module, args, kwargs) -> None:
        if module.training and torch.is_grad_enabled():
            self.counted.forward_begins(module, args, kwargs)

    def step(self, *inputs, loss_of=square_mean, micro_batches: int = 1, **kwargs) -> flops.Counted:
        """A step: its micro-batches' forward and backward, its gradients left in .grad."""
        self.model.zero_grad(set_to_none=True)
        for _ in range(micro_batches):
            loss = loss_of(self.model(*inputs, **kwargs))
            self.counted.backward_begins(False)
            try:
                loss.backward()
            finally:
                self.counted.backward_ends()
        return self.counted.total()


def torchs_count(model, *inputs, loss_of=square_mean, **kwargs) -> int:
    """torch's own counter over one real eager step (forward and backward), the watch's hooks set
    aside (a Watched model's count must not see this step)."""
    flops.register_missing_formulas(torch)
    with wrapping.hooks_set_aside(), FlopCounterMode(display=False) as counter:
        loss_of(model(*inputs, **kwargs)).backward()
    model.zero_grad(set_to_none=True)
    return counter.get_total_flops()
