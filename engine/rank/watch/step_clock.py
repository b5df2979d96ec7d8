"""Where one rank's step goes: its time between two steps, taken apart on the host's clock.

Every moment of the rank's main thread between two step boundaries is told to exactly one part,
the innermost phase open at that moment, so that nothing is counted twice (Lightning runs the
forward and the backward inside ``optimizer.step(closure)``: those moments are forward and
backward, and only the rest of the optimizer's call is the optimizer's):

- **data**: inside a DataLoader iterator's ``__next__`` while gradients are on (an evaluation
  loop's loader runs under ``no_grad`` and is left to host). A script without a DataLoader
  (nanoGPT's ``get_batch``) makes its batches in host time.
- **forward**: inside the forward of the hooked root (the DDP or FSDP module, or the model the
  optimizer steps) while training.
- **backward**: inside the outer ``torch.autograd.backward`` call, until autograd has run the
  whole graph.
- **comm**: from then until ``backward()`` returns: the engine's final callbacks, where DDP waits
  for its last gradient buckets' all-reduce (and FSDP for its reduce-scatter). The end of the
  graph is marked by a callback queued on the engine when the loss's node runs, the first of the
  final callbacks (DDP queues its own at its last gradient): no communication hook is registered,
  and nothing waits on a device.
- **optimizer**: inside an optimizer's ``step`` (torch's global pre- and post-hooks).
- **host**: every other moment (the loss outside the model, ``.item()``, logging, ``zero_grad``):
  measured as the time no phase was open, not taken as what the step time leaves, so that the
  parts adding up to the step time is a check.

On a GPU these are the host's times: the forward a GPU runs asynchronously shows as the time to
launch it, and its compute as whatever waits for it next. The clock is only touched from the
thread that made it (the rank's main thread); the end of the graph may be marked from any.
Standard library only: the watch imports no torch before the script does.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from mgpu_tui.engine.protocol.events import STEP_PARTS as PARTS


class StepClock:
    """The parts of the step under way: :meth:`enter` and :meth:`leave` a phase, :meth:`cut` at
    each step boundary."""

    def __init__(self, now: Callable[[], float] = time.perf_counter) -> None:
        self._now = now
        self.restart()

    def restart(self) -> None:
        """From nothing, on this thread (a forked child's own clock)."""
        self._thread: int | None = threading.get_ident()  # None: set aside (aside())
        self._stack: list[str] = []
        self.raised_in: tuple[str, int] | None = None  # (the part, id() of the exception) it raised in
        self._since = self._now()
        self._parts = dict.fromkeys(PARTS, 0.0)
        self._graph_done: float | None = None
        self.distributed = False  # this process trains with others: mark each graph's end
        self.will_sync = True  # the last forward's DDP module syncs its gradients (not no_sync())

    def enter(self, part: str) -> None:
        if threading.get_ident() != self._thread:
            return
        self._charge(self._now())
        self._stack.append(part)

    def leave(self, part: str) -> None:
        """``part`` ends (with any phase opened inside it and never left: an exception's way out)."""
        if threading.get_ident() != self._thread or part not in self._stack:
            return
        raised = sys.exc_info()[1]  # an exception on its way out (a finally, an always-called hook)
        if raised is not None and (self.raised_in is None or self.raised_in[1] != id(raised)):
            self.raised_in = (self._stack[-1], id(raised))  # its innermost part (an id: nothing kept)
        now = self._now()
        done = self._graph_done
        if (
            part == "backward"
            and self._stack[-1] == "backward"
            and done is not None
            and self._since <= done <= now
        ):
            self._charge(done)  # the graph ran until here; the rest of the call waited for the buckets
            self._stack[-1] = "comm"
        self._charge(now)
        while self._stack.pop() not in (part, "comm" if part == "backward" else part):
            pass
        if part == "backward":
            self._graph_done = None

    @contextlib.contextmanager
    def aside(self) -> Iterator[None]:
        """Time that is no part of the step (mgpu-tui's own FLOP count, flops/): charged to
        none, and no phase entered meanwhile is seen."""
        self._charge(self._now())
        thread, self._thread = self._thread, None
        try:
            yield
        finally:
            self._thread = thread
            self._since = self._now()

    def within(self, part: str) -> bool:
        """Whether ``part`` is open (on the clock's thread; elsewhere nothing is)."""
        return part in self._stack and threading.get_ident() == self._thread

    def graph_done(self) -> None:
        """Autograd ran the backward's whole graph (an engine final callback: any thread)."""
        self._graph_done = self._now()

    def cut(self) -> dict[str, float]:
        """The parts since the last cut, in seconds; the phases still open go on into the next."""
        self._charge(self._now())
        parts, self._parts = self._parts, dict.fromkeys(PARTS, 0.0)
        return parts

    def _charge(self, now: float) -> None:
        self._parts[self._stack[-1] if self._stack else "host"] += max(0.0, now - self._since)
        self._since = now


def timed(clock: StepClock, part: str, function: Callable[..., Any]) -> Callable[..., Any]:
    """``function``, its calls told to ``part``."""

    @functools.wraps(function)
    def timed_call(*args: Any, **kwargs: Any) -> Any:
        clock.enter(part)
        try:
            return function(*args, **kwargs)
        finally:
            clock.leave(part)

    return timed_call


# ---- the phases in torch (the torch module is passed in: this module never imports it) ----------


def install(torch: Any, clock: StepClock) -> None:
    """The backward and the optimizer's step, timed in every rank of this process: a wrapper of
    ``torch.autograd.backward`` (``Tensor.backward`` calls it; its outer call alone: reentrant
    checkpointing runs a backward inside it) and torch's global optimizer step hooks. Where the
    process trains with others (``clock.distributed``), a backward that syncs (not one of DDP's
    ``no_sync()`` micro-batches) also marks the end of its graph (_mark_graph_end): the rest of the
    call is communication. The mark costs about 12 us a backward on the CPU, the wrapper 6."""
    optimizers = importlib.import_module("torch.optim.optimizer")
    optimizers.register_optimizer_step_pre_hook(lambda *_: clock.enter("optimizer"))
    optimizers.register_optimizer_step_post_hook(lambda *_: clock.leave("optimizer"))
    backward = torch.autograd.backward
    engine = torch.autograd.Variable._execution_engine

    def first_node_runs(grads: Any) -> None:
        try:
            engine.queue_callback(clock.graph_done)
        except Exception:  # noqa: BLE001 (never the script's backward that fails)
            pass

    outer = timed(clock, "backward", backward)

    @functools.wraps(backward)
    def timed_backward(*args: Any, **kwargs: Any) -> Any:
        if clock.within("backward"):
            return backward(*args, **kwargs)
        if clock.distributed and clock.will_sync:
            _mark_graph_end(args[0] if args else kwargs.get("tensors"), first_node_runs)
        return outer(*args, **kwargs)

    torch.autograd.backward = timed_backward


def hook_forward(
    module: Any, clock: StepClock, torch: Any, wrap: Callable[[Any], Any] = lambda hook: hook
) -> list[Any]:
    """The forward of ``module`` (the root: the DDP or FSDP module, the model) timed while it
    trains: its handles (``wrap``: each hook kept out of torch.compile's graphs, where dynamo is
    loaded). The end is a forward hook that runs even when the forward raises."""

    def before(mod: Any, args: Any) -> None:
        try:
            if mod.training and torch.is_grad_enabled():
                clock.enter("forward")
                # DDP decides in its forward whether the backward syncs (no_sync() micro-batches do not)
                clock.will_sync = bool(getattr(mod, "require_backward_grad_sync", True))
        except Exception:  # noqa: BLE001 (a hook of mgpu-tui's never fails the script's forward)
            pass

    def after(mod: Any, args: Any, output: Any) -> None:
        try:
            clock.leave("forward")  # (only where its start was one)
        except Exception:  # noqa: BLE001
            pass

    return [
        module.register_forward_pre_hook(wrap(before)),
        module.register_forward_hook(wrap(after), always_call=True),
    ]


def _mark_graph_end(tensors: Any, first_node_runs: Callable[[Any], None]) -> None:
    """When the loss's node runs (the first of the graph), a callback is queued on autograd's engine:
    final callbacks run in order once the whole graph has, so it runs before DDP's (queued at its
    last gradient; it then waits for the buckets' all-reduce), and the time after it is the
    communication that backward did not hide. The hook goes with the graph (a graph kept for a
    second backward marks that one's end too)."""
    try:
        first = tensors[0] if isinstance(tensors, (list, tuple)) and tensors else tensors
        node = getattr(first, "grad_fn", None)
        if node is not None:
            node.register_prehook(first_node_runs)
    except Exception:  # noqa: BLE001 (the backward goes on; its tail is counted as backward)
        pass
