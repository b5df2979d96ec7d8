"""What an unchanged script's rank reports, learnt from torch itself.

The bootstrap (bootstrap.py) installs a :class:`ScriptWatch` in every rank of a script run. It
imports no torch: its hooks go in when the script imports torch (torch_hooks.after_import). Each figure,
and how it is taken (docs/your-script.md says the same to users):

- **a step** is a step of the lead optimizer (the first to step; torch's global optimizer
  post-hook; step_figures.Lead) after at least one ``backward()`` since the last step: a GAN's two
  optimizers, or a ZeroRedundancyOptimizer and the one inside it, count once an iteration; the
  micro-batches of gradient accumulation are not steps; a step GradScaler skips still is one.
- **samples and tokens**: the batch entering the root DistributedDataParallel or FSDP module while
  it trains (model_root.py): its first tensor's first dimension, and for a 2-D integer batch (token
  ids) all its elements as tokens.
- **data_s**: from the previous step's end to the first such forward: the time on its batch.
- **parts**: the step taken apart, from the second step on (step_clock.py): data, forward,
  backward, the communication backward did not hide, the optimizer and the host's time between.
- **loss**: the one-element tensor ``backward()`` is called on (unscaled when GradScaler scaled
  it), summed over the step's micro-batches (scripts divide each by the accumulation count); on a
  GPU read without draining the stream (step_figures.py). A loop that calls backward and never
  steps (saliency maps) keeps MAX_LOSSES at most: past them, they go, and that step has no loss.
- **memory**: on CUDA (once the script initialised it), the allocator's current and peak bytes on
  the loss's device; otherwise the process's RSS and its peak, read at most every READ_EVERY_S (the
  end's at once: step_figures.Memory); where it goes is memory/'s.
- **about**: the process group's backend, the device the loss is on, and the batch.
- **beats**: when the training thread (the latest backward's; the main thread before any)
  moved and nothing was written for BEAT_S (stack_signature.py).

Where the hooks go into torch is torch_hooks.py; the figures are read in step_figures.py.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import time
from collections.abc import Callable, Iterator
from threading import get_ident
from types import ModuleType
from typing import Any

from mgpu_tui.engine.rank.reporter import ScriptReporter
from mgpu_tui.engine.rank.watch import (
    flops,
    frameworks,
    stack_signature,
    step_clock,
    step_figures,
    torch_hooks,
)
from mgpu_tui.engine.rank.watch.memory.watch import MemoryWatch
from mgpu_tui.engine.rank.watch.model_root import TRAINING_STEP_SOURCE, HookedRoot, batch_source, find_root
from mgpu_tui.engine.rank.watch.stack_signature import BEAT_S
from mgpu_tui.engine.rank.watch.step_figures import PendingSteps, Step, StepBatch
from mgpu_tui.engine.rank.watch.torch_hooks import after_import
from mgpu_tui.engine.rank.watch.wrapping import guarded

__all__ = ["ScriptReporter", "ScriptWatch"]

MAX_LOSSES = 1024  # the losses of one step kept (its micro-batches'); past them the step has none


def _quiet(hook: Any) -> Any:
    """A hook that fails says so once (ScriptWatch._failed) and returns: the script goes on."""

    @functools.wraps(hook)
    def quiet(self: ScriptWatch, *args: Any, **kwargs: Any) -> None:
        try:
            hook(self, *args, **kwargs)
        except Exception as exc:  # noqa: BLE001
            self._failed(hook.__name__.strip("_").replace("_", " "), exc)

    return quiet


class ScriptWatch:
    """Counts one rank's steps, samples, loss and memory from torch's own hooks."""

    def __init__(
        self,
        reporter: ScriptReporter | None,
        program: str,
        *,
        become: Callable[[int | None, int], ScriptReporter] | None = None,
    ) -> None:
        """``reporter``: the rank's (torchrun's RANK); None under ``mgpu-tui exec``, where
        ``become(rank, world_size)`` makes it once the process joins the default group, or steps an
        optimizer after a backward with none (a trainer: ``rank`` None); until then nothing runs."""
        self.reporter, self._become = reporter, become
        self.trainer = False  # this process trains without a process group (a trainer of its own)
        self.ended: Callable[[BaseException | None], None] | None = None  # tells a training's end
        self.program = os.path.abspath(program) if os.path.exists(program) else program
        self.torch: Any = None  # the torch module, once the script imports it (its attributes are untyped)
        self._failures: set[str] = set()  # hooks that failed once, and said so
        self.clock, self._memory = step_clock.StepClock(), step_figures.Memory()  # step_clock.py, its time
        ends = functools.partial(self.flops_window, "forward_ends", of_root=True)  # the FLOP count's
        self._root = HookedRoot(self._before_forward, self.clock, ends)  # whose forward counts the batch
        self._start_counting()

    def _start_counting(self) -> None:
        """This process's own figures and threads, from nothing: at its start, and in a forked
        child (which must carry nothing of its parent's)."""
        self.steps = 0
        self._backwards = 0  # backward() calls since the last step: its micro-batches
        self.in_backward = False  # a backward inside a backward (reentrant checkpointing) is not one
        self._losses: list[Any] = []
        self._losses_let_go = False  # more than MAX_LOSSES since the last step: its loss is unknown
        self.training_thread: int | None = None  # the thread of the latest backward (the beats follow it)
        self._scaled: dict[int, tuple[Any, Any]] = {}  # id(scaled loss) -> (it, the loss unscaled)
        self._batch = StepBatch(TRAINING_STEP_SOURCE)  # what the step under way trained on
        self._whole = False  # inside a framework's training step that is the forward (frameworks.py)
        self._pending = PendingSteps()
        self._device: Any = None  # where the loss is: the rank's device
        self._about_said = False
        self._batch_said = False  # an about with the batch (it may come a step after the first)
        self._root_searched = False  # a job with no DDP or FSDP: its model looked for once (model_root.py)
        self._backend: str | None = None  # the default process group's, once seen
        self._last_event_at = time.monotonic()
        self._lead = step_figures.Lead()  # the optimizer whose steps are the steps
        self._beats = stack_signature.Beats(self.program, self._tick, lambda: self.training_thread)
        self.clock.restart()
        self._loader_workers: int | None = None  # its training DataLoader's, once it gave a batch
        self._flops = flops.StepFlops(self.torch) if self.torch is not None else None
        self.memory = MemoryWatch()  # where the memory goes (memory/)

    # ---- installing --------------------------------------------------------------------

    def start(self) -> None:
        """The hooks, once the script imports torch (now, if it has); the beats, where the rank is
        known (else once the process becomes one)."""
        after_import("torch", guarded(self._install))
        after_import("torch.distributed.fsdp", guarded(self._install_fsdp))
        after_import("torch._dynamo", guarded(self._after_dynamo))
        frameworks.install(self)
        if self.reporter is not None:
            self._beats.start()

    def _become_rank(self, rank: int | None, world_size: int) -> None:
        """This process is a rank (``rank`` None: a trainer) from now on: its reporter (its files,
        stack handler, flight-recorder thread) and its beats start here, never before."""
        if self.reporter is not None or self._become is None:
            return
        self.reporter = self._become(rank, world_size)
        self.trainer = rank is None
        self._last_event_at = time.monotonic()
        self._beats.start()

    def no_one(self) -> None:
        """Its training ended and was told (process_watch.py): no one again, until it trains anew."""
        self.reporter, self.trainer = None, False
        self._root.let_go()
        self._start_counting()

    def after_fork_in_child(self) -> None:
        """A forked child (a data-loader worker, a rank of ``start_processes(start_method="fork")``)
        starts as no one, with nothing of its parent's: not its events file, its stack handler, its
        threads (which a fork does not copy) or its counts."""
        reporter, self.reporter, self.trainer = self.reporter, None, False
        if reporter is not None:
            reporter.abandon()
        self._memory.close()  # its parent's /proc/self
        self._start_counting()

    def _install(self, torch: ModuleType) -> None:
        self.torch = self._root.torch = torch
        self._flops = flops.StepFlops(torch)
        torch_hooks.install(torch, self)

    def _install_fsdp(self, fsdp: ModuleType) -> None:
        torch_hooks.install_fsdp(fsdp, self)

    @_quiet
    def joined_group(self) -> None:
        """init_process_group returned: a process that trained alone until now (a helper before the
        job: a learning-rate finder) ends that training; it is the group's rank now."""
        if self.trainer and self.ended is not None:
            self.ended(None)
        self.see_group()

    @_quiet
    def before_destroy(self) -> None:
        self.see_group()  # a group made some other way is named before it goes
        if self.reporter is not None:  # its last collectives, while they are there
            self.reporter.dump_flight_records()

    @_quiet
    def hook_root(self, module: Any, kind: str) -> None:
        self._root.hook(module, kind)

    def _after_dynamo(self, dynamo: ModuleType) -> None:
        self._root.after_dynamo(dynamo, self.move_root)

    @_quiet
    def move_root(self, inner: Any, outer: Any) -> None:
        self._root.move(inner, outer)

    # ---- the hooks (the main thread; each one @_quiet: a figure lost, never the script's step) ----

    def _failed(self, what: str, exc: Exception) -> None:
        if what not in self._failures:
            self._failures.add(what)
            print(
                f"mgpu-tui: some figures of this rank will be missing: {what} failed "
                f"({type(exc).__name__}: {exc})",
                file=sys.stderr,
            )

    @_quiet
    def _before_forward(self, module: Any, args: tuple, kwargs: dict) -> None:
        if self._whole or not module.training or not self.torch.is_grad_enabled():
            return  # an evaluation (its samples are not trained on), or counted by the whole step
        self.flops_window("forward_begins", module, args, kwargs)
        self._batch.count(args, kwargs)

    @contextlib.contextmanager
    def whole_forward(self, args: tuple, kwargs: dict, module: Any) -> Iterator[None]:
        """A framework's training step that is the step's forward (frameworks.py): its batch, time
        and FLOPs (keyed by its batch, args[0]) the forward's; a module's forward in it adds nothing."""
        outer = not self._whole  # a training step inside a training step: the outer one counts
        if outer:
            with contextlib.suppress(Exception):
                self._batch.count(args, kwargs, whole=True)
            self.flops_window("forward_begins", module, args[:1], {})
            self._whole = True
            self.clock.enter("forward")
        try:
            yield
        finally:
            if outer:
                self.clock.leave("forward")
                self._whole = False
                self.flops_window("forward_ends")

    @_quiet
    def flops_window(self, edge: str, *args: Any, of_root: bool = False) -> None:  # step_flops.py's
        if self._flops is not None and not (of_root and self._whole):  # (a whole step's are its own)
            getattr(self._flops, edge)(*args)
        self.memory.window(self.torch, edge, self._flops, args)

    @_quiet
    def on_loader_batch(self, batch: Any, loader: Any = None) -> None:
        """A batch a DataLoader gave while gradients are on (_watched_next: an evaluation's is not
        handed here): counted, and used for the step where no model's forward counted one (a model
        whose forward is not what the script calls: Lightning on one device calls training_step)."""
        workers = getattr(loader, "_num_workers", None)
        if isinstance(workers, int):
            self._loader_workers = workers
        self._batch.loader(batch)

    @_quiet
    def on_backward(self, tensors: Any) -> None:
        self._backwards += 1
        self.training_thread = get_ident()
        torch = self.torch
        if isinstance(tensors, torch.Tensor) and tensors.numel() == 1 and not tensors.is_complex():
            scaled = self._scaled.pop(id(tensors), None)
            loss = scaled[1] if scaled is not None and scaled[0] is tensors else tensors.detach()
            if len(self._losses) >= MAX_LOSSES:  # no step for that long: none of them is a step's loss
                self._losses.clear()
                self._losses_let_go = True
            self._losses.append(loss)
            self.memory.creep.loss(tensors)
            if self._device is None:
                self._device = loss.device

    @_quiet
    def after_optimizer_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self.memory.optimizer_stepped(optimizer)
        if self._lead.leads(optimizer) and self._backwards:  # else: another optimizer of this iteration
            if not self._root and not self._root_searched:
                self._find_model(optimizer)
            self._count_step()

    def _find_model(self, optimizer: Any) -> None:
        """No DDP or FSDP module: the batch is counted at the model this optimizer steps (from
        the next step on), found once (model_root.py)."""
        self._root_searched = True
        root = find_root(optimizer, sys._getframe(1), self.torch.nn.Module)
        if root is not None:
            self.hook_root(root, batch_source(root))

    @_quiet
    def remember_scaled(self, outputs: Any, result: Any) -> None:
        torch = self.torch
        if isinstance(outputs, torch.Tensor) and isinstance(result, torch.Tensor) and outputs.numel() == 1:
            if len(self._scaled) >= MAX_LOSSES:  # scaled and never backward: let go
                self._scaled.clear()
            self._scaled[id(result)] = (result, outputs.detach())

    @_quiet
    def after_scaler_step(self, optimizer: Any) -> None:
        # The optimizer did not step (inf or NaN gradients), so its hook did not count: still a step.
        if self._backwards and self._lead.leads(optimizer):
            self._count_step()

    def _count_step(self) -> None:
        if self.reporter is None and not self.see_group():
            self._become_rank(None, 1)  # a step with no process group: a trainer of its own
        counted = self._flops.total() if self._flops is not None else flops.Counted(None, None, False)
        now = time.time()
        self.steps += 1
        self._backwards = 0
        self._scaled.clear()
        losses, self._losses = self._losses, []
        if self._losses_let_go:
            losses, self._losses_let_go = [], False
        samples, tokens, source, data_s = self._batch.take(now, self._root.source)
        parts: dict[str, float] | None = self.clock.cut()
        if self.steps == 1 or counted.observed:
            parts = None  # the first's holds all since the watch started; an observed one, the count
        memory = self._memory.read(self.torch, self._device)
        loss = step_figures.loss_of(self.torch, losses)
        step = Step(self.steps, now, samples, tokens, data_s, memory, loss, parts, counted)
        self.memory.at_step(self.torch, self._root.module(), step)
        self._pending.add(step)
        if self._pending.due(now):
            self._write_ready(wait=len(self._pending) > step_figures.MAX_PENDING)
        if (
            not self._about_said
            or (step.samples and not self._batch_said)
            or (self._flops and self._flops.news)
        ):
            self._say_about(step.samples, source)

    # ---- figures ------------------------------------------------------------------------

    def _write_ready(self, wait: bool = False) -> None:
        if self._pending.write_ready(self.reporter, wait):
            self._last_event_at = time.monotonic()

    def _say_about(self, batch: int, source: str | None = None) -> None:
        self._about_said = True
        self.see_group()
        fields = step_figures.about_fields(
            self.torch,
            self._device,
            self._backend,
            batch=batch,
            batch_source=source,
            loader_workers=self._loader_workers,
            counted=self._flops,
        )
        self._batch_said = self._batch_said or "batch" in fields
        if self._flops is not None:
            self._flops.news = False
        if self.reporter is not None:
            self.reporter.about(**fields)

    # ---- the end ---------------------------------------------------------------------------

    def finish(self) -> dict[str, Any]:
        """Write what is still pending; the facts of the end for the ``done`` event. The beat thread is
        joined first: nothing of mgpu-tui may still call into torch while the interpreter shuts down."""
        self._beats.stop()
        if self.torch is None:
            return {"process_group": "none"}
        try:
            while self._pending:
                self._write_ready(wait=True)
        except Exception:  # noqa: BLE001 (a GPU that failed cannot give the last losses: the end is still told)
            self._pending.clear()
        alive = self.see_group()
        if alive and self.reporter is not None:
            self.reporter.dump_flight_records()
        if not self._about_said:
            self._say_about(0)
        _, peak = self._memory.read(self.torch, self._device, fresh=True)
        group = "none" if self.trainer else "alive" if alive else ("destroyed" if self._backend else "none")
        return {"process_group": group, "mem_peak_bytes": peak}

    def see_group(self) -> bool:
        """Whether the default process group is there now; its backend kept once seen."""
        dist = getattr(self.torch, "distributed", None)
        if dist is None:
            return False
        try:
            alive = bool(dist.is_available() and dist.is_initialized())
            if alive and self._backend is None:
                self._backend = str(dist.get_backend())
                if self._backend == "undefined":  # made without a backend: one for each device type
                    self._backend = str(dist.get_backend_config())  # "cpu:gloo,cuda:nccl"
                self.clock.distributed = int(dist.get_world_size()) > 1  # its backward may wait for others
            if alive and self.reporter is None:
                self._become_rank(int(dist.get_rank()), int(dist.get_world_size()))
        except Exception:  # noqa: BLE001 (a group torn down between the two calls)
            return False
        return alive

    # ---- beats ------------------------------------------------------------------------------

    def _tick(self, where: str | None, moved: bool) -> None:
        if moved and self.reporter is not None and time.monotonic() - self._last_event_at >= BEAT_S:
            self.reporter.beat(where)
            self._last_event_at = time.monotonic()
        elif self.reporter is not None:  # the last steps written, however the script goes on
            self._write_ready()
            self.reporter.flush()
        if self._backend is None and self.torch is not None:
            self.see_group()  # a script that destroys its group before it ends still named it
