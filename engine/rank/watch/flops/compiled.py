"""Compiled code inside an observed step: what the count can see of it, and what it cannot.

The counting mode (counter.py) keeps a compiled graph compiled (``ignore_compile_internals``), and
so sees only what the graph dispatches at run time:

- a graph of ``eager``, ``aot_eager`` (and its partitioner variants) or a backend of the job's own
  that runs its FX graph runs aten operations one by one: each is seen and counted, as eager code;
- a graph inductor compiled runs its own kernels (generated C++ or Triton), which torch's
  dispatcher never sees; only its calls of extern kernels (a matrix multiply handed to the BLAS)
  are dispatched. Each such graph is counted from what it declares instead: its post-grad graph
  (the aten operations its kernels compute, with their shapes, which inductor keeps as text with
  every compiled graph, cached ones too), read by declared.py; what it dispatches meanwhile is not
  counted again. A graph whose text cannot be read that way (dynamic shapes, subgraphs) makes the
  count n/a, with the reason;
- any other backend (cudagraphs, TensorRT, TVM, ...) runs kernels the count cannot see: a job that
  compiled with one gets n/a, with the reason.

On torch before 2.9 a mode has no ``ignore_compile_internals``: a step is never observed once the
job has compiled anything (Dynamo would skip the frame for good); n/a, with the reason.
"""

from __future__ import annotations

import functools
import importlib
import sys
import weakref
from typing import Any

from mgpu_tui.engine.rank.watch.flops.declared import declared_flops

SEEN_AT_RUN_TIME = {"eager", "aot_eager", "aot_eager_decomp_partition", "aot_eager_default_partitioner"}
INDUCTOR = "inductor"

# The observation open now (counter.py's mode), for the inductor graphs' wrapper; None between.
current: Any = None
# id() of a graph read -> (the graph, weakly; what it declares): inductor's graphs are dataclasses
# that compare by value, so they cannot be a weak table's keys; nothing is put on them.
_declared: dict[int, tuple[weakref.ref, int | str]] = {}


def backends_in_use() -> list[str]:
    """The names of the backends the job's torch.compile calls have used so far (Dynamo's own
    record: ``eval_frame.cached_backends``); a backend of the job's own by its function's name,
    marked ``own:``."""
    eval_frame = sys.modules.get("torch._dynamo.eval_frame")
    if eval_frame is None:
        return []
    registry = sys.modules.get("torch._dynamo.backends.registry")
    named = {id(fn): name for name, fn in getattr(registry, "_COMPILER_FNS", {}).items()}
    names = []
    for backend in list(getattr(eval_frame, "cached_backends", {}).values()):
        if backend is None:
            continue  # torch._dynamo.disable's
        name = getattr(backend, "compiler_name", None)
        inner = getattr(backend, "compiler_fn", backend)
        if type(backend).__name__ == "_TorchCompileInductorWrapper":
            names.append(INDUCTOR)
        elif id(inner) in named:
            names.append(named[id(inner)])
        elif isinstance(name, str) and name in named.values():
            names.append(name)
        else:
            names.append(f"own:{name or getattr(inner, '__name__', type(inner).__name__)}")
    return names


def compiles() -> int:
    """How many frames Dynamo has compiled so far (its own counter): a window in which it compiled
    counted the compiler's work too (DDP's graph splitter compiles with every mode still open, and
    inductor may benchmark kernels on real tensors), so it is counted again, once compiled."""
    utils = sys.modules.get("torch._dynamo.utils")
    counters = getattr(utils, "counters", None)
    try:
        return int(counters["frames"]["total"]) if counters is not None else 0
    except Exception:  # noqa: BLE001 (a Dynamo without that counter: no window is ever taken for a compile)
        return 0


def why_unseen(torch: Any, sees_compiled: bool) -> str | None:
    """Why a step of this job cannot be observed now (None: it can)."""
    backends = backends_in_use()
    if not backends:
        return None
    if not sees_compiled:
        return (
            f"torch {torch.__version__.split('+')[0]} cannot count FLOPs while a compiled graph runs "
            "without making torch.compile fall back to eager for good (torch 2.9 and later can)"
        )
    unseen = sorted({b for b in backends if b not in SEEN_AT_RUN_TIME and b != INDUCTOR and ":" not in b})
    if unseen:
        return (
            f"torch.compile's backend {', '.join(unseen)} runs kernels that torch's dispatcher does not "
            "see, and its graphs declare no FLOPs"
        )
    return None


def install_inductor(output_code: Any) -> None:
    """Inductor's compiled graphs (``CompiledFxGraph``), as they run: while a step is observed, each
    adds what it declares and the mode counts nothing it dispatches meanwhile; otherwise the call
    is passed straight through (one attribute read more). Once a process: a forked child's count
    reaches this through ``current``."""
    graph = getattr(output_code, "CompiledFxGraph", None)
    original: Any = graph.__dict__.get("__call__") if isinstance(graph, type) else None
    if original is None or getattr(original, "_mgpu_tui_declares", False):
        return

    @functools.wraps(original)
    def __call__(self: Any, inputs: Any) -> Any:
        mode = current
        if mode is None:
            return original(self, inputs)
        _declare(mode, self)
        mode.paused += 1
        try:
            return original(self, inputs)
        finally:
            mode.paused -= 1

    __call__._mgpu_tui_declares = True  # type: ignore[attr-defined]
    setattr(graph, "__call__", __call__)  # noqa: B010 (its class, typed by nothing here)


def _declare(mode: Any, graph: Any) -> None:
    """``graph``'s declared FLOPs added to the open count (read once a graph, then kept beside it
    in a weak table: nothing is put on inductor's object); the reason where it declares none."""
    if mode.paused:
        return  # a graph inside a graph (none today): the outer one declared it
    try:
        kept = _declared.get(id(graph))
        if kept is not None and kept[0]() is graph:
            found = kept[1]
        else:
            text = getattr(graph, "inductor_post_grad_graph_str", "")
            found = declared_flops(importlib.import_module("torch"), text)
            for key in [k for k, (ref, _) in _declared.items() if ref() is None]:
                del _declared[key]  # graphs gone (torch._dynamo.reset)
            _declared[id(graph)] = (weakref.ref(graph), found)
    except Exception as exc:  # noqa: BLE001 (the count's own failure: never the job's)
        found = f"its compiled graph could not be read ({type(exc).__name__})"
    if isinstance(found, str):
        if mode.unseen is None:
            mode.unseen = f"a graph torch.compile's inductor compiled declares no FLOPs: {found}"
        return
    mode.declare(found)
