"""How the watch puts itself around torch's functions inside a rank (script_watch.py uses these):
every wrapper passes its arguments through exactly as called (positional or keyword, under any
name: Lightning calls ``DistributedDataParallel(module=...)``), keeps the wrapped signature, and can
never raise into the script; a rebinding reaches every module that bound a function by name
(``init_device_mesh`` calls ``init_process_group`` through its own); and a module the watch hooked
pickles and deep-copies without the hook (``torch.save(ddp_model)``), and is scripted, exported and
traced by FX without it (:func:`hooks_aside_in`). Standard library only.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import inspect
import sys
import weakref
from collections.abc import Iterator
from types import FrameType, ModuleType
from typing import Any


def forget_locals(frame: FrameType) -> None:
    """Let go of the snapshot that reading a function frame's ``f_locals`` leaves on it before Python
    3.13: it would keep that moment's locals (a step's batch, its outputs) alive as long as the frame,
    memory the job would not hold bare. The locals themselves are untouched; the next read (or the
    function's own ``locals()``) fills the snapshot again."""
    if sys.version_info < (3, 13) and frame.f_code.co_flags & inspect.CO_OPTIMIZED:
        frame.f_locals.clear()


def guarded(install: Any) -> Any:
    """An install that fails says so in one line and leaves the script alone: a monitor must never
    be why a script's ``import torch`` fails (a torch too old or too new for a hook, say)."""

    @functools.wraps(install)
    def guarded(module: ModuleType) -> None:
        try:
            install(module)
        except Exception as exc:  # noqa: BLE001
            print(
                f"mgpu-tui: some figures of this rank will be missing: {install.__name__} failed "
                f"({type(exc).__name__}: {exc})",
                file=sys.stderr,
            )

    return guarded


def backend_for(backend: str | None, device: str) -> str | None:
    """The backend a device uses: a group made without naming one has one per device type
    (torch's config, "cpu:gloo,cuda:nccl"), and the rank's device picks it."""
    if backend is None or ":" not in backend:
        return backend
    pairs = dict(part.split(":", 1) for part in backend.split(",") if ":" in part)
    return pairs.get(device.split(":")[0], backend)


# The ids of the forward hooks the watch put on the script's modules (torch numbers every hook
# handle once, across all modules): what a pickle or a deep copy of such a module leaves out.
_OUR_HOOKS: set[int] = set()
_HOOKED: weakref.WeakSet[Any] = weakref.WeakSet()  # the modules that hold one
_HOOK_STATE = (
    "_forward_pre_hooks",
    "_forward_pre_hooks_with_kwargs",
    "_forward_hooks",
    "_forward_hooks_with_kwargs",
    "_forward_hooks_always_called",
)


def keep_out_of_copies(module: Any, hook_id: int) -> None:
    """A module the watch hooked pickles and deep-copies as it would bare: ``torch.save(ddp_model)``
    and ``copy.deepcopy(model)`` get its state without the watch's hook (a bound method of the watch,
    which cannot be pickled, and which a checkpoint loaded without mgpu-tui could not use). Its
    class's ``__getstate__`` (torch's own, which copies the instance's ``__dict__``) is wrapped once,
    and leaves out the watch's hook ids alone."""
    _OUR_HOOKS.add(hook_id)
    _HOOKED.add(module)
    cls = type(module)
    if getattr(cls.__dict__.get("__getstate__"), "_mgpu_tui_keeps_hooks_out", False):
        return
    original = cls.__getstate__

    @functools.wraps(original)
    def __getstate__(self: Any) -> Any:
        state = original(self)
        if not isinstance(state, dict):
            return state
        for name in _HOOK_STATE:
            hooks = state.get(name)
            if isinstance(hooks, dict) and any(key in _OUR_HOOKS for key in hooks):
                kept = type(hooks)() if isinstance(hooks, collections.OrderedDict) else {}
                kept.update((key, hook) for key, hook in hooks.items() if key not in _OUR_HOOKS)
                state = {**state, name: kept}
        return state

    __getstate__._mgpu_tui_keeps_hooks_out = True  # type: ignore[attr-defined]
    cls.__getstate__ = __getstate__


# Where torch makes something else of a module, and would meet the watch's hooks: TorchScript
# compiles each hook (ours cannot be), export's Dynamo traces into them (and breaks the graph on
# torch._dynamo.disable), FX would run them on proxies. (module, function or Class.method): each
# is torch's own inner entry, called by attribute, below the frames that torch.jit.script and
# torch.jit.trace read their caller's names from. torch.onnx.export goes through torch.export (or
# through the JIT's tracer, where the hooks see the trace and count nothing: model_root._traced).
SET_ASIDE_IN = (
    ("torch.jit._recursive", "create_script_module"),
    ("torch.export._trace", "_export"),
    ("torch.fx._symbolic_trace", "Tracer.trace"),
)


def hooks_aside_in(module: ModuleType, name: str) -> None:
    """``module``'s function ``name`` (or ``Class.method``) runs with the watch's hooks set aside."""
    owner: Any = module
    *outer, attribute = name.split(".")
    for part in outer:
        owner = getattr(owner, part)
    original = getattr(owner, attribute)
    if getattr(original, "_mgpu_tui_sets_hooks_aside", False):
        return

    @functools.wraps(original)
    def aside(*args: Any, **kwargs: Any) -> Any:
        if not _HOOKED:
            return original(*args, **kwargs)
        with hooks_set_aside():
            return original(*args, **kwargs)

    aside._mgpu_tui_sets_hooks_aside = True  # type: ignore[attr-defined]
    setattr(owner, attribute, aside)


@contextlib.contextmanager
def hooks_set_aside() -> Iterator[None]:
    """The watch's forward hooks out of every module that holds one, and back in their places after
    (a hook the job added meanwhile stays, after them). Never raises of its own."""
    saved: list[tuple[Any, str, list[tuple[int, Any]]]] = []
    try:
        for module in list(_HOOKED):
            for name in _HOOK_STATE:
                table = module.__dict__.get(name)
                if table and any(key in _OUR_HOOKS for key in table):
                    saved.append((module, name, list(table.items())))
                    for key in [key for key in table if key in _OUR_HOOKS]:
                        del table[key]
    except Exception:  # noqa: BLE001 (a module of the job's that cannot be read: left as it is)
        pass
    try:
        yield
    finally:
        for module, name, before in saved:
            try:
                _put_back(module.__dict__[name], before)
            except Exception:  # noqa: BLE001
                pass


def _put_back(table: Any, before: list[tuple[int, Any]]) -> None:
    now = dict(table)
    table.clear()
    for key, hook in before:
        if key in _OUR_HOOKS:
            table[key] = hook
        elif key in now:
            table[key] = now.pop(key)
    table.update(now)


def argument(args: tuple, kwargs: dict, index: int, name: str) -> Any:
    """The argument a function was given at ``index`` or by ``name``, however it was called."""
    return args[index] if len(args) > index else kwargs.get(name)


def around(original: Any, *, before: Any = None, after: Any = None) -> Any:
    """``original`` with mgpu-tui's part before or after it. The arguments pass through exactly as
    called (``*args, **kwargs``: no name of the wrapper's can collide with a keyword, as ``module``
    did with ``DDP(module=...)``, which Lightning and Fabric call); ``functools.wraps`` keeps the
    wrapped signature for ``inspect``. ``before(args, kwargs)`` and ``after(args, kwargs, result)``
    must be quiet themselves (ScriptWatch's hooks are: @_quiet); a failure of theirs that escapes
    anyway is swallowed here, so it never becomes the user's exception."""

    @functools.wraps(original)
    def watched(*args: Any, **kwargs: Any) -> Any:
        if before is not None:
            _swallow(before, args, kwargs)
        result = original(*args, **kwargs)
        if after is not None:
            _swallow(after, args, kwargs, result)
        return result

    return watched


def _swallow(part: Any, *args: Any) -> None:
    try:
        part(*args)
    except Exception:  # noqa: BLE001 (mgpu-tui's part of a wrapper never fails the script's call)
        pass


def rebind(original: Any, watched: Any) -> None:
    """Put ``watched`` in place of ``original`` in every torch module that bound it by name."""
    name = original.__name__
    for module_name, module in list(sys.modules.items()):
        torch_module = module_name == "torch" or module_name.startswith("torch.")
        if torch_module and getattr(module, name, None) is original:
            setattr(module, name, watched)
