"""When and where a script's watch goes into torch (script_watch.py holds what each hook does).

When: right after a module is first imported, whoever imports it (after_import). The bootstrap
(bootstrap.py) must patch torch before a script uses it, without importing torch itself: a script
that never imports torch must not pay for it, nor see it in ``sys.modules``. So a finder at the
head of ``sys.meta_path`` lets the normal machinery find the module, then wraps its loader so that
``then(module)`` runs once the module's own code has run. A module already imported gets ``then``
at once.

Where: the optimizer step post-hook, ``autograd.backward``, GradScaler, the DataLoader's iterator,
the DDP and FSDP constructors and the process group's start and end. Each wrapper passes its
arguments through exactly as called (wrapping.around: positional or keyword, under any name, the
wrapped signature kept) and does its own part quietly: a figure lost, never the script's step."""

from __future__ import annotations

import functools
import importlib
import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any

from mgpu_tui.engine.rank.watch import flops, step_clock
from mgpu_tui.engine.rank.watch.wrapping import (
    SET_ASIDE_IN,
    argument,
    around,
    guarded,
    hooks_aside_in,
    rebind,
)

if TYPE_CHECKING:
    from mgpu_tui.engine.rank.watch.script_watch import ScriptWatch


Then = Callable[[ModuleType], None]


class _Loader(importlib.abc.Loader):
    """The module's own loader, with ``then`` after its ``exec_module``; everything else delegated."""

    def __init__(self, inner: Any, then: Then) -> None:
        self._inner, self._then = inner, then

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._inner.exec_module(module)
        self._then(module)

    def __getattr__(self, name: str) -> Any:  # get_resource_reader, is_package, get_source, ...
        return getattr(self._inner, name)


class _Finder(importlib.abc.MetaPathFinder):
    """Hands out the awaited modules' specs with a loader that calls their ``then``s. A name stays
    awaited until its module has really been executed: ``importlib.util.find_spec(name)`` (an
    availability check, as transformers and accelerate make before torch is imported) executes
    nothing, and the import after it must still be seen."""

    def __init__(self) -> None:
        self.waiting: dict[str, list[Then]] = {}

    def find_spec(self, name: str, path: Any = None, target: ModuleType | None = None):
        if name not in self.waiting:
            return None
        for finder in sys.meta_path:
            if isinstance(finder, _Finder) or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is None or isinstance(spec.loader, _Loader):
            return spec  # a namespace package: nothing runs, so nothing to wait for (yet)
        spec.loader = _Loader(spec.loader, functools.partial(self._executed, name))
        return spec

    def _executed(self, name: str, module: ModuleType) -> None:
        """The first spec of ``name`` executed: its ``then``s, once, and the name awaited no more."""
        for then in self.waiting.pop(name, ()):
            then(module)


_finder = _Finder()


def after_import(name: str, then: Then) -> None:
    """Call ``then(module)`` once ``name`` is imported (at once, if it already is)."""
    module = sys.modules.get(name)
    if module is not None:
        then(module)
        return
    if _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)
    _finder.waiting.setdefault(name, []).append(then)


def install(torch: ModuleType, watch: ScriptWatch) -> None:
    """The watch's hooks into torch, as the script imports it."""
    for module, name in SET_ASIDE_IN:  # nothing of the watch where the job scripts or exports its model
        after_import(module, guarded(_setting_hooks_aside(name)))
    after_import("torch._inductor.output_code", guarded(flops.install_inductor))  # its graphs' FLOPs
    optimizers = importlib.import_module("torch.optim.optimizer")
    optimizers.register_optimizer_step_post_hook(watch.after_optimizer_step)
    made = optimizers.Optimizer.__init__  # each optimizer made: what it holds, even before it steps
    optimizers.Optimizer.__init__ = around(made, after=lambda a, k, out: watch.memory.optimizer_stepped(a[0]))
    torch.autograd.backward = _watched_backward(torch.autograd.backward, watch)
    step_clock.install(torch, watch.clock)
    scaler = importlib.import_module("torch.amp.grad_scaler").GradScaler
    scaler.scale = around(
        scaler.scale, after=lambda a, k, out: watch.remember_scaled(argument(a, k, 1, "outputs"), out)
    )
    scaler.step = around(
        scaler.step, after=lambda a, k, out: watch.after_scaler_step(argument(a, k, 1, "optimizer"))
    )
    loaders = importlib.import_module("torch.utils.data.dataloader")._BaseDataLoaderIter
    loaders.__next__ = _watched_next(loaders.__next__, watch)
    ddp = torch.nn.parallel.DistributedDataParallel
    ddp.__init__ = around(ddp.__init__, after=lambda a, k, out: watch.hook_root(a[0], "ddp"))
    dist = torch.distributed
    if dist.is_available():
        # Every module that bound the function by name (torch.distributed, distributed_c10d,
        # device_mesh, which init_device_mesh calls it through) gets the watched one.
        rebind(
            dist.init_process_group,
            around(dist.init_process_group, after=lambda a, k, out: watch.joined_group()),
        )
        rebind(
            dist.destroy_process_group,
            around(dist.destroy_process_group, before=lambda a, k: watch.before_destroy()),
        )


def _setting_hooks_aside(name: str) -> Then:
    def set_hooks_aside(module: ModuleType) -> None:
        hooks_aside_in(module, name)

    return set_hooks_aside


def install_fsdp(fsdp: ModuleType, watch: ScriptWatch) -> None:
    """FSDP2's fully_shard (wherever a script imports it from) and FSDP1's class."""
    shard = getattr(fsdp, "fully_shard", None)
    if shard is not None:

        def after_shard(args: tuple, kwargs: dict, out: Any) -> None:
            module = argument(args, kwargs, 0, "module")
            watch.hook_root(out if out is not None else module, "fsdp")

        watched = around(shard, after=after_shard)
        for name in ("torch.distributed.fsdp", "torch.distributed._composable.fsdp"):
            if getattr(sys.modules.get(name), "fully_shard", None) is shard:
                setattr(sys.modules[name], "fully_shard", watched)  # noqa: B010
    fsdp1 = getattr(fsdp, "FullyShardedDataParallel", None)
    if fsdp1 is not None:
        fsdp1.__init__ = around(fsdp1.__init__, after=lambda a, k, out: watch.hook_root(a[0], "fsdp"))


def _watched_next(next_batch: Any, watch: ScriptWatch) -> Any:
    """A DataLoader iterator's ``__next__``: a training batch's wait is the step's data, and the
    batch is counted (an evaluation's, under no_grad, is neither)."""

    @functools.wraps(next_batch)
    def watched_next(*args: Any, **kwargs: Any) -> Any:
        if not watch.torch.is_grad_enabled():
            return next_batch(*args, **kwargs)
        watch.clock.enter("data")
        try:
            batch = next_batch(*args, **kwargs)
        finally:
            watch.clock.leave("data")
        watch.on_loader_batch(batch, args[0] if args else None)
        return batch

    return watched_next


def _watched_backward(backward: Any, watch: ScriptWatch) -> Any:
    """torch.autograd.backward (Tensor.backward calls it): the outer call of a backward is a
    micro-batch, and its one-element tensor the loss; a backward inside it (reentrant
    checkpointing) is not another."""

    @functools.wraps(backward)
    def watched_backward(*args: Any, **kwargs: Any) -> Any:
        outer = not watch.in_backward
        if outer:
            watch.on_backward(argument(args, kwargs, 0, "tensors"))
            watch.in_backward = True
            watch.flops_window("backward_begins", bool(argument(args, kwargs, 3, "create_graph")))
        try:
            return backward(*args, **kwargs)
        finally:
            if outer:
                watch.in_backward = False
                watch.flops_window("backward_ends")

    return watched_backward
