"""The model of a job with no DDP or FSDP wrapper (one process, ``nn.DataParallel``, a Trainer on
one device), found once, when its optimizer first steps: the outermost module that holds the
parameters that optimizer steps. Its forward pre-hook then counts the batch, as the DDP module's
does (script_watch.py). No global hook, and no scan of every object when the script's own frames
hold the model (they nearly always do: ``model``, ``self.model``); the garbage collector's list
is the last resort, once (it took 160 ms on a Hugging Face model).
"""

from __future__ import annotations

import gc
from types import FrameType, ModuleType
from typing import Any

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
