"""The frameworks whose training step a plain loop's hooks do not see whole, each met at its own
entry point, class-level, so that nothing is left on the script's objects:

- **DeepSpeed's engine** (``deepspeed.initialize``, the Hugging Face Trainer and accelerate under
  DeepSpeed): ZeRO's optimizer steps flat fp32 partitions of the parameters, so the model it trains
  cannot be found from the optimizer's parameters (model_root.py), and its forward went uncounted:
  the batch was the DataLoader's (one read ahead by accelerate at the first step) and the forward's
  time was the host's. The engine is the root from its construction, as a DDP module is: its
  forward (which calls the model's) counts the batch and is the step's forward.
- **Lightning on one device** (no DDP, FSDP or DeepSpeed around the module): the strategy calls
  the LightningModule's ``training_step``, never its forward, inside ``optimizer.step(closure)``;
  the forward went as the optimizer's time. There ``Strategy.training_step`` is the step's forward,
  its batch the step's samples, and the FLOP count's window (flops/) opens and closes around it.
  Under a wrapper, the wrapper's forward (hooked as the root) already runs the module's
  ``training_step``, and this adds nothing.

Each wrapper passes its arguments through and never raises into the job (wrapping.py).
"""

from __future__ import annotations

import functools
from types import ModuleType
from typing import TYPE_CHECKING, Any

from mgpu_tui.engine.rank.watch.torch_hooks import after_import
from mgpu_tui.engine.rank.watch.wrapping import around, guarded

if TYPE_CHECKING:
    from mgpu_tui.engine.rank.watch.script_watch import ScriptWatch

DEEPSPEED_ENGINE = "deepspeed.runtime.engine"
LIGHTNING_STRATEGY = ("lightning.pytorch.strategies.strategy", "pytorch_lightning.strategies.strategy")


def install(watch: ScriptWatch) -> None:
    """Each framework's hook, once (and only if) the job imports that framework."""
    after_import(DEEPSPEED_ENGINE, guarded(functools.partial(_deepspeed, watch)))
    for name in LIGHTNING_STRATEGY:
        after_import(name, guarded(functools.partial(_lightning, watch)))


def _deepspeed(watch: ScriptWatch, module: ModuleType) -> None:
    engine = module.DeepSpeedEngine
    engine.__init__ = around(engine.__init__, after=lambda a, k, out: watch.hook_root(a[0], "deepspeed"))


def _lightning(watch: ScriptWatch, module: ModuleType) -> None:
    strategy = module.Strategy
    strategy.training_step = _training_step(strategy.training_step, watch)


def _training_step(step: Any, watch: ScriptWatch) -> Any:
    @functools.wraps(step)
    def training_step(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            whole = self.model is self.lightning_module and watch.torch.is_grad_enabled()
        except Exception:  # noqa: BLE001 (a strategy not set up as Lightning's are: left alone)
            whole = False
        if not whole:
            return step(self, *args, **kwargs)
        with watch.whole_forward(args, kwargs, self.lightning_module):
            return step(self, *args, **kwargs)

    return training_step
