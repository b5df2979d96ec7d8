"""The model of a job with no DDP or FSDP wrapper (one process, ``nn.DataParallel``, a Trainer on
one device), found once, when its optimizer first steps: the outermost module that holds the
parameters that optimizer steps. Its forward pre-hook then counts the batch, as the DDP module's
does (script_watch.py). No global hook, and no scan of every object when the script's own frames
hold the model (they nearly always do: ``model``, ``self.model``); the garbage collector's list
is the last resort, once (it took 160 ms on a Hugging Face model).
"""

from __future__ import annotations

import gc
import importlib
import sys
import weakref
from collections.abc import Callable
from types import FrameType, ModuleType
from typing import Any

from mgpu_tui.engine.rank.watch import step_clock
from mgpu_tui.engine.rank.watch.wrapping import around, forget_locals, keep_out_of_copies

MAX_FRAMES = 64  # the frames of the stack looked through, innermost first
MAX_CANDIDATES = 4096  # modules weighed at most


def stepped_parameters(optimizer: Any) -> set[int]:
    """The ids of the parameters ``optimizer`` steps."""
    return {id(p) for group in getattr(optimizer, "param_groups", ()) for p in group.get("params", ())}


def find_root(optimizer: Any, frame: FrameType | None, module_type: type) -> Any:
    """The outermost ``module_type`` instance holding every parameter ``optimizer`` steps: among
    the modules the stack's frames hold (a local, or an attribute of one), else among every live
    module. A wrapper (DataParallel, torch.compile's) holds its module and so is outer. None when
    none holds them all."""
    wanted = stepped_parameters(optimizer)
    if not wanted:
        return None
    found = _best(_in_frames(frame, module_type), wanted)
    if found is None:
        modules = (o for o in gc.get_objects() if issubclass(type(o), module_type))
        found = _best(modules, wanted)
    return found


def _in_frames(frame: FrameType | None, module_type: type) -> list[Any]:
    seen: dict[int, Any] = {}
    depth = 0
    while frame is not None and depth < MAX_FRAMES and len(seen) < MAX_CANDIDATES:
        for value in list(frame.f_locals.values()):
            for candidate in (value, *_attributes(value)):
                if issubclass(type(candidate), module_type):  # type(): never the object's own __class__
                    seen.setdefault(id(candidate), candidate)
        forget_locals(frame)  # the snapshot read kept the step's tensors alive
        frame, depth = frame.f_back, depth + 1
    return list(seen.values())


def _attributes(value: Any) -> list[Any]:
    """One level into an object's own attributes (``self.model``), never into a torch module's or a
    Python module's (``torch.distributed``'s deprecated names warn when touched, into the script's
    stderr)."""
    if isinstance(value, ModuleType):
        return []
    attributes = getattr(value, "__dict__", None)
    if not isinstance(attributes, dict) or hasattr(value, "_parameters"):
        return []
    return list(attributes.values())[:256]


def _best(modules: Any, wanted: set[int]) -> Any:
    """Of ``modules``, the one with the most submodules among those holding every wanted parameter."""
    best, size = None, -1
    for count, module in enumerate(modules):
        if count >= MAX_CANDIDATES:
            break
        try:
            held = {id(p) for p in module.parameters()}
            if not wanted <= held:
                continue
            submodules = sum(1 for _ in module.modules())
        except Exception:  # noqa: BLE001 (a module of the script's that cannot be walked)
            continue
        if submodules > size:
            best, size = module, submodules
    return best


def batch_source(module: Any) -> str:
    """Where the batch was counted, in words: the module's class, and the GPUs DataParallel spreads
    it over (its device_ids), or that it spreads it over none."""
    name = type(module).__name__
    ids = getattr(module, "device_ids", None)
    if name == "DataParallel" or (ids is not None and hasattr(module, "module")):
        if not ids:
            return f"the batches entering {name}, which has no GPU here and runs its module as it is"
        return f"the batches entering {name}, spread over {', '.join(f'cuda:{i}' for i in ids)}"
    return f"the batches entering {name}"


LOADER_SOURCE = "the batches its DataLoader gave"  # where no model's forward counted them
TRAINING_STEP_SOURCE = "the batches entering training_step"  # Lightning on one device (frameworks.py)
BATCH_SOURCE = {
    "ddp": "the batches entering DistributedDataParallel",
    "fsdp": "the batches entering FSDP",
    "deepspeed": "the batches entering DeepSpeed's engine",
}


class HookedRoot:
    """The root module's forward hooks: ``before_forward(module, args, kwargs)`` sees each batch,
    ``after_forward()`` each forward's end (even when it raises: the FLOP count's window closes
    there), and the step clock (step_clock.py) each forward's start and end."""

    def __init__(
        self,
        before_forward: Callable[[Any, tuple, dict], None],
        clock: step_clock.StepClock,
        after_forward: Callable[[], None] = lambda: None,
    ) -> None:
        self._before_forward = before_forward
        self._after_forward = after_forward
        self._clock = clock
        self.torch: Any = None  # set when the script imports torch
        self._roots: list[tuple[weakref.ref, list[Any]]] = []  # the hooked modules and their handles
        self.source: str | None = None  # where the batch is counted (BATCH_SOURCE), once hooked

    def __bool__(self) -> bool:
        return bool(self._roots)

    def module(self) -> Any:
        """The hooked root module (None: none yet, or it is gone)."""
        return self._roots[0][0]() if self._roots else None

    def hook(self, module: Any, kind: str) -> None:
        """Hook ``module`` if it is the first wrapped, or holds the one hooked so far (FSDP is applied
        to the layers first, then to the root); another model wrapped later is left alone."""
        inside = {id(m) for m in module.modules()}
        for ref, handles in self._roots:
            hooked = ref()
            if hooked is None:
                continue
            if id(hooked) in inside and hooked is not module:
                for handle in handles:
                    handle.remove()
                continue
            return  # a root is hooked already, and this module does not hold it
        handles = self._forward_hooks(module, _untraced)
        self._roots = [(weakref.ref(module), handles)]
        self.source = BATCH_SOURCE.get(kind, kind)

    def let_go(self) -> None:
        """No root from now on (a training ended: the next one finds its own model)."""
        for _, handles in self._roots:
            for handle in handles:
                handle.remove()
        self._roots, self.source = [], None

    def _forward_hooks(self, module: Any, wrap: Any) -> list[Any]:
        """The root's hooks: before its forward (the batch, and the forward's start) and after it,
        even when it raises (the forward's end); kept out of pickles and deep copies."""
        handles = [module.register_forward_pre_hook(wrap(self._before), with_kwargs=True)]
        handles += step_clock.hook_forward(module, self._clock, self.torch, wrap)
        handles.append(module.register_forward_hook(wrap(self._after), always_call=True))
        for handle in handles:
            keep_out_of_copies(module, handle.id)
        return handles

    def _before(self, module: Any, args: tuple, kwargs: dict) -> None:
        if not _traced(self.torch):
            self._before_forward(module, args, kwargs)

    def _after(self, module: Any, args: Any, output: Any) -> None:
        self._after_forward()

    def after_dynamo(self, dynamo: ModuleType, move: Callable[[Any, Any], None]) -> None:
        """torch._dynamo is loaded now (torch.compile after DDP): the hooks set so far are kept out
        of its graphs, and a root torch.compile wraps from now on is handed to ``move``."""
        for ref, handles in self._roots:
            module = ref()
            for handle in handles:
                for name in ("_forward_pre_hooks", "_forward_hooks"):
                    hooks = getattr(module, name, {})
                    if module is not None and handle.id in hooks:
                        hooks[handle.id] = dynamo.disable(hooks[handle.id])
        compiled = importlib.import_module("torch._dynamo.eval_frame").OptimizedModule
        compiled.__init__ = around(
            compiled.__init__, after=lambda a, k, out: move(getattr(a[0], "_orig_mod", None), a[0])
        )

    def move(self, inner: Any, outer: Any) -> None:
        """torch.compile wrapped the hooked root: the hook goes to the wrapper, whose own call runs
        eagerly before the compiled forward, so nothing of mgpu-tui is in (or breaks) the graph."""
        for ref, handles in self._roots:
            if inner is not None and ref() is inner:
                for handle in handles:
                    handle.remove()
                self._roots = [(weakref.ref(outer), self._forward_hooks(outer, lambda hook: hook))]
                return


def _traced(torch: Any) -> bool:
    """Whether the forward runs inside torch.jit.trace or an FX trace (the job making something of
    its model, not training it): the watch counts nothing of it."""
    fx = sys.modules.get("torch.fx._symbolic_trace")
    return bool(torch._C._get_tracing_state()) or getattr(fx, "_is_fx_tracing_flag", False) is True


def _untraced(hook: Any) -> Any:
    """``hook`` kept out of torch.compile's graphs (torch._dynamo.disable), if dynamo is loaded:
    importing it costs a second, which a script that never compiles must not pay. A script that
    loads it later (torch.compile after DDP) gets the hooks wrapped then (HookedRoot.after_dynamo)."""
    dynamo = sys.modules.get("torch._dynamo")
    return dynamo.disable(hook) if dynamo is not None and hasattr(dynamo, "disable") else hook
