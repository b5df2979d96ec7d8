"""What an unchanged script's rank reports, learnt from torch itself.

The bootstrap (bootstrap.py) installs a :class:`ScriptWatch` in every rank of a script run. It
imports no torch: its hooks go in when the script imports torch (after_import.py). Each figure,
and how it is taken (docs/your-script.md says the same to users):

- **a step** is a step of the lead optimizer (the first to step; torch's global optimizer
  post-hook) after at least one ``backward()`` since the last step. Several optimizers (a GAN's two,
  each after its own backward), or a ZeroRedundancyOptimizer and the optimizer inside it, count
  once an iteration; the micro-batches of gradient accumulation are not steps; a step that
  GradScaler skips (inf or NaN gradients, so the optimizer does not step) still is one. Should
  another optimizer step twice while the lead does not, it leads from then on.
- **samples and tokens**: the batch entering the root DistributedDataParallel or FSDP module while
  it trains (a forward pre-hook on that module alone, kept out of torch.compile's graphs; with
  several models, the first one wrapped): its first tensor's first dimension, and for a 2-D integer
  batch (token ids) all its elements as tokens.
- **data_s**: from the end of the previous step to the first such forward, the time the rank spent
  on its batch (a straggler's evidence, aggregate.py).
- **parts**: the step taken apart, from the second step on: data, forward, backward, the
  communication backward did not hide, the optimizer and the host's time between (step_clock.py
  says how each is measured); with the training DataLoader's worker count, in ``about``.
- **loss**: the one-element tensor ``backward()`` is called on (unscaled when GradScaler scaled
  it), summed over the step's micro-batches (scripts divide each by the accumulation count). On a
  GPU it is read without draining the stream: a non-blocking copy into pinned memory, read once its
  CUDA event has completed (a step's event is written when its loss is known, in order).
- **memory**: on CUDA, once the script has initialised it (the watch never does: it would open a
  context on GPU 0 in every rank), the allocator's current and peak bytes on the loss's device;
  otherwise the process's RSS and its peak.
- **about**: the backend of the default process group, the device the loss is on, and the batch.
- **beats**: a thread looks at the main thread's stack every BEAT_S; when it moved (another call,
  another line of an outer frame) and no event was written meanwhile, it writes a ``beat``. A rank
  that neither steps nor beats has not moved: the stall watch's evidence (watchdog.py).
"""

from __future__ import annotations

import collections
import functools
import importlib
import os
import resource
import sys
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from mgpu_tui.engine.rank import reporter as reporter_module
from mgpu_tui.engine.rank.reporter import Reporter
from mgpu_tui.engine.rank.threads import stop_before_exit
from mgpu_tui.engine.rank.watch import flop_count, step_clock
from mgpu_tui.engine.rank.watch.after_import import after_import
from mgpu_tui.engine.rank.watch.model_root import batch_source, find_root
from mgpu_tui.engine.rank.watch.stack_signature import main_frame, signature
from mgpu_tui.engine.rank.watch.wrapping import (
    argument,
    around,
    backend_for,
    guarded,
    keep_out_of_copies,
    rebind,
)

BEAT_S = 1.0
MAX_PENDING = 64  # steps whose loss the GPU has not delivered yet; beyond this, read at once
BATCH_SOURCE = {"ddp": "the batches entering DistributedDataParallel", "fsdp": "the batches entering FSDP"}
LOADER_SOURCE = "the batches its DataLoader gave"


def _quiet(hook: Any) -> Any:
    """A hook that fails says so once (ScriptWatch._failed) and returns: the script goes on."""

    @functools.wraps(hook)
    def quiet(self: ScriptWatch, *args: Any, **kwargs: Any) -> None:
        try:
            hook(self, *args, **kwargs)
        except Exception as exc:  # noqa: BLE001
            self._failed(hook.__name__.strip("_").replace("_", " "), exc)

    return quiet


class ScriptReporter(Reporter):
    """The reporter of a script that does not know mgpu-tui: it prints nothing (the script's own
    output stays its own) and says what the script used (``about``) and that it moves (``beat``).
    Made, it is the rank's one reporter: a Reporter the script makes speaks through it."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        reporter_module._bootstrap = self

    def _print(self, message: str) -> None:
        return

    def about(self, **fields: Any) -> None:
        self._write("about", fields)

    def beat(self, where: str | None) -> None:
        self._write("beat", {"where": where})

    def adopt(self, reporter: Reporter) -> None:
        self.script_reports_steps = True

    script_reports_steps = False  # the script made a Reporter: its steps are the rank's, not ours


@dataclass
class _Step:
    step: int
    at: float
    samples: int
    tokens: int
    data_s: float | None
    mem: tuple[int | None, int | None]
    loss: Any  # a float, None, or (pinned tensor, CUDA event) until the GPU has delivered it
    parts: dict[str, float] | None  # where its time went (step_clock.py); None for the first
    flops: int | None  # its floating-point operations, counted by torch (flop_count.py)
    aside_s: float  # the seconds counting them took inside this step: not the step's own


class ScriptWatch:
    """Counts one rank's steps, samples, loss and memory from torch's own hooks."""

    def __init__(
        self,
        reporter: ScriptReporter | None,
        program: str,
        *,
        become_rank: Callable[[int, int], ScriptReporter] | None = None,
    ) -> None:
        """``reporter``: the rank's, where the launcher said which rank this is (torchrun's RANK);
        None under ``mgpu-tui exec``, where ``become_rank(rank, world_size)`` makes it the moment
        the process becomes a rank (it joins the default process group, or steps an optimizer
        after a backward with none): until then it writes nothing and runs no thread."""
        self.reporter = reporter
        self._become = become_rank
        self.program = os.path.abspath(program) if os.path.exists(program) else program
        self.torch: Any = None  # the torch module, once the script imports it (its attributes are untyped)
        self._roots: list[tuple[weakref.ref, list[Any]]] = []  # the hooked modules and their handles
        self._batch_source: str | None = None  # where the batch is counted (BATCH_SOURCE), once hooked
        self._failures: set[str] = set()  # hooks that failed once, and said so
        self._clock = step_clock.StepClock()  # where each step's time goes (step_clock.py)
        self._start_counting()

    def _start_counting(self) -> None:
        """This process's own figures and threads, from nothing: at its start, and in a forked
        child (which must carry nothing of its parent's)."""
        self.steps = 0
        self._backwards = 0  # backward() calls since the last step: its micro-batches
        self._in_backward = False  # a backward inside a backward (reentrant checkpointing) is not one
        self._losses: list[Any] = []
        self._scaled: dict[int, tuple[Any, Any]] = {}  # id(scaled loss) -> (it, the loss unscaled)
        self._samples = self._tokens = 0
        self._loader_samples = self._loader_tokens = 0  # the training batches its DataLoaders gave
        self._first_forward_at: float | None = None
        self._last_step_at = time.time()
        self._pending: collections.deque[_Step] = collections.deque()
        self._device: Any = None  # where the loss is: the rank's device
        self._about_said = False
        self._batch_said = False  # an about with the batch (it may come a step after the first)
        self._root_searched = False  # a job with no DDP or FSDP: its model looked for once (model_root.py)
        self._backend: str | None = None  # the default process group's, once seen
        self._last_event_at = time.monotonic()
        self._stopped = threading.Event()
        self._lead: int | None = None  # id() of the optimizer whose steps are the steps
        self._others: dict[int, int] = {}  # id() of another optimizer -> its steps since the lead's
        self._beats: threading.Thread | None = None
        self._clock.restart()
        self._loader_workers: int | None = None  # its training DataLoader's, once it gave a batch
        self._flops = flop_count.StepFlops(self.torch) if self.torch is not None else None

    # ---- installing --------------------------------------------------------------------

    def start(self) -> None:
        """The hooks, once the script imports torch (now, if it has); the beats, where the rank is
        known (else from the moment the process becomes one)."""
        after_import("torch", guarded(self._install))
        after_import("torch.distributed.fsdp", guarded(self._install_fsdp))
        after_import("torch._dynamo", guarded(self._after_dynamo))
        if self.reporter is not None:
            self._start_beats()

    def _start_beats(self) -> None:
        self._beats = threading.Thread(target=self._watch_stack, name="mgpu-beat", daemon=True)
        self._beats.start()
        stop_before_exit(self._stop_beats)

    def _stop_beats(self) -> None:
        """No beat after this: the thread is joined (it reads the main thread's frames and the
        process group, which the script's exit handlers may be tearing down)."""
        self._stopped.set()
        beats = self._beats
        if beats is not None and beats is not threading.current_thread():
            beats.join(timeout=5)

    def _become_rank(self, rank: int, world_size: int) -> None:
        """This process is a rank from now on: its reporter (its files, its stack handler, its
        flight-recorder thread) and its beats start here, never before."""
        if self.reporter is not None or self._become is None:
            return
        self.reporter = self._become(rank, world_size)
        self._last_event_at = time.monotonic()
        self._start_beats()

    def after_fork_in_child(self) -> None:
        """A forked child (a data-loader worker, a rank of ``start_processes(start_method="fork")``)
        starts as no rank, with nothing of its parent's: not its events file, its stack handler, its
        threads (which a fork does not copy) or its counts. It becomes a rank of its own if it joins
        a process group."""
        reporter, self.reporter = self.reporter, None
        if reporter is not None:
            reporter.abandon()
        self._start_counting()

    def _install(self, torch: ModuleType) -> None:
        """Each wrapper passes its arguments through exactly as called (_around: positional or
        keyword, under any name, the wrapped signature kept) and does its own part quietly."""
        self.torch = torch
        self._flops = flop_count.StepFlops(torch)
        optimizers = importlib.import_module("torch.optim.optimizer")
        optimizers.register_optimizer_step_post_hook(self._after_optimizer_step)
        torch.autograd.backward = self._watched_backward(torch.autograd.backward)
        step_clock.install(torch, self._clock)
        scaler = importlib.import_module("torch.amp.grad_scaler").GradScaler
        scaler.scale = around(
            scaler.scale, after=lambda a, k, out: self._remember_scaled(argument(a, k, 1, "outputs"), out)
        )
        scaler.step = around(
            scaler.step, after=lambda a, k, out: self._after_scaler_step(argument(a, k, 1, "optimizer"))
        )
        loaders = importlib.import_module("torch.utils.data.dataloader")._BaseDataLoaderIter
        loaders.__next__ = self._watched_next(loaders.__next__)
        ddp = torch.nn.parallel.DistributedDataParallel
        ddp.__init__ = around(ddp.__init__, after=lambda a, k, out: self._hook_root(a[0], "ddp"))
        dist = torch.distributed
        if dist.is_available():
            # Every module that bound the function by name (torch.distributed, distributed_c10d,
            # device_mesh, which init_device_mesh calls it through) gets the watched one.
            rebind(
                dist.init_process_group,
                around(dist.init_process_group, after=lambda a, k, out: self._see_group()),
            )
            rebind(
                dist.destroy_process_group,
                around(dist.destroy_process_group, before=lambda a, k: self._before_destroy()),
            )

    def _watched_next(self, next_batch: Any) -> Any:
        """A DataLoader iterator's ``__next__``: a training batch's wait is the step's data, and the
        batch is counted (an evaluation's, under no_grad, is neither)."""

        @functools.wraps(next_batch)
        def watched_next(*args: Any, **kwargs: Any) -> Any:
            torch = self.torch
            if not torch.is_grad_enabled():
                return next_batch(*args, **kwargs)
            self._clock.enter("data")
            try:
                batch = next_batch(*args, **kwargs)
            finally:
                self._clock.leave("data")
            self._on_loader_batch(batch, args[0] if args else None)
            return batch

        return watched_next

    def _watched_backward(self, backward: Any) -> Any:
        """torch.autograd.backward (Tensor.backward calls it): the outer call of a backward is a
        micro-batch, and its one-element tensor the loss; a backward inside it (reentrant
        checkpointing) is not another."""

        @functools.wraps(backward)
        def watched_backward(*args: Any, **kwargs: Any) -> Any:
            outer = not self._in_backward
            if outer:
                self._on_backward(argument(args, kwargs, 0, "tensors"))
                self._in_backward = True
            try:
                return backward(*args, **kwargs)
            finally:
                if outer:
                    self._in_backward = False

        return watched_backward

    @_quiet
    def _before_destroy(self) -> None:
        self._see_group()  # a group made some other way is named before it goes
        if self.reporter is not None:
            self.reporter.dump_flight_records()  # its last collectives, while they are there

    def _install_fsdp(self, fsdp: ModuleType) -> None:
        """FSDP2's fully_shard (wherever a script imports it from) and FSDP1's class."""
        shard = getattr(fsdp, "fully_shard", None)
        if shard is not None:

            def after_shard(args: tuple, kwargs: dict, out: Any) -> None:
                module = argument(args, kwargs, 0, "module")
                self._hook_root(out if out is not None else module, "fsdp")

            watched = around(shard, after=after_shard)
            for name in ("torch.distributed.fsdp", "torch.distributed._composable.fsdp"):
                if getattr(sys.modules.get(name), "fully_shard", None) is shard:
                    setattr(sys.modules[name], "fully_shard", watched)  # noqa: B010
        fsdp1 = getattr(fsdp, "FullyShardedDataParallel", None)
        if fsdp1 is not None:
            fsdp1.__init__ = around(fsdp1.__init__, after=lambda a, k, out: self._hook_root(a[0], "fsdp"))

    @_quiet
    def _hook_root(self, module: Any, kind: str) -> None:
        """Hook ``module`` if it is the first wrapped, or holds the one hooked so far (FSDP is applied
        to the layers first, then to the root); another model wrapped later is left alone."""
        inside = {id(m) for m in module.modules()}
        kept: list[tuple[weakref.ref, list[Any]]] = []
        for ref, handles in self._roots:
            hooked = ref()
            if hooked is None:
                continue
            if id(hooked) in inside and hooked is not module:
                for handle in handles:
                    handle.remove()
                continue
            return  # a root is hooked already, and this module does not hold it
        handles = self._forward_hooks(module, self._untraced)
        self._roots = [*kept, (weakref.ref(module), handles)]
        self._batch_source = BATCH_SOURCE.get(kind, kind)

    def _forward_hooks(self, module: Any, wrap: Any) -> list[Any]:
        """The root's hooks: before its forward (the batch, and the forward's start) and after it,
        even when it raises (the forward's end); kept out of pickles and deep copies."""
        handles = [module.register_forward_pre_hook(wrap(self._before_forward), with_kwargs=True)]
        handles += step_clock.hook_forward(module, self._clock, self.torch, wrap)
        for handle in handles:
            keep_out_of_copies(module, handle.id)
        return handles

    def _untraced(self, hook: Any) -> Any:
        """``hook`` kept out of torch.compile's graphs (torch._dynamo.disable), if dynamo is loaded:
        importing it costs a second, which a script that never compiles must not pay. A script that
        loads it later (torch.compile after DDP) gets the hooks wrapped then (_after_dynamo)."""
        dynamo = sys.modules.get("torch._dynamo")
        return dynamo.disable(hook) if dynamo is not None and hasattr(dynamo, "disable") else hook

    def _after_dynamo(self, dynamo: ModuleType) -> None:
        for ref, handles in self._roots:
            module = ref()
            for handle in handles:
                for name in ("_forward_pre_hooks", "_forward_hooks"):
                    hooks = getattr(module, name, {})
                    if module is not None and handle.id in hooks:
                        hooks[handle.id] = dynamo.disable(hooks[handle.id])
        compiled = importlib.import_module("torch._dynamo.eval_frame").OptimizedModule
        compiled.__init__ = around(
            compiled.__init__, after=lambda a, k, out: self._move_root(getattr(a[0], "_orig_mod", None), a[0])
        )

    @_quiet
    def _move_root(self, inner: Any, outer: Any) -> None:
        """torch.compile wrapped the hooked root: the hook goes to the wrapper, whose own call runs
        eagerly before the compiled forward, so nothing of mgpu-tui is in (or breaks) the graph."""
        for ref, handles in self._roots:
            if inner is not None and ref() is inner:
                for handle in handles:
                    handle.remove()
                self._roots = [(weakref.ref(outer), self._forward_hooks(outer, lambda hook: hook))]
                return

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
        torch = self.torch
        if not module.training or not torch.is_grad_enabled():
            return  # an evaluation: its samples are not trained on
        if self._flops is not None:  # (the count's own replay never gets here: its hooks are set aside)
            self._flops.seen(module, args, kwargs)
        batch = _first_tensor(args)
        if batch is None:
            batch = _first_tensor(tuple(kwargs.values()))
        if batch is None or batch.dim() == 0:
            return
        self._samples += int(batch.shape[0])
        if batch.dim() == 2 and not batch.is_floating_point() and not batch.is_complex():
            self._tokens += int(batch.numel())
        if self._first_forward_at is None:
            self._first_forward_at = time.time()

    @_quiet
    def _on_loader_batch(self, batch: Any, loader: Any = None) -> None:
        """A batch a DataLoader gave while gradients are on (_watched_next: an evaluation's is not
        handed here): counted, and
        used for the step where no model's forward counted one (a model whose forward is not what
        the script calls: Lightning on one device calls training_step)."""
        workers = getattr(loader, "_num_workers", None)
        if isinstance(workers, int):
            self._loader_workers = workers
        first = _first_tensor((batch,))
        if first is None or first.dim() == 0:
            return
        self._loader_samples += int(first.shape[0])
        if first.dim() == 2 and not first.is_floating_point() and not first.is_complex():
            self._loader_tokens += int(first.numel())

    @_quiet
    def _on_backward(self, tensors: Any) -> None:
        self._backwards += 1
        torch = self.torch
        if isinstance(tensors, torch.Tensor) and tensors.numel() == 1 and not tensors.is_complex():
            scaled = self._scaled.pop(id(tensors), None)
            loss = scaled[1] if scaled is not None and scaled[0] is tensors else tensors.detach()
            self._losses.append(loss)
            if self._device is None:
                self._device = loss.device

    def _leads(self, optimizer: Any) -> bool:
        """Whether ``optimizer``'s step is the iteration's (the lead's; the first to step leads)."""
        key = id(optimizer)
        if self._lead is None or key == self._lead:
            self._lead = key
            self._others.clear()
            return True
        self._others[key] = self._others.get(key, 0) + 1
        if self._others[key] >= 2:  # the lead stopped stepping: this one leads now
            self._lead = key
            self._others.clear()
            return True
        return False

    @_quiet
    def _after_optimizer_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if self._leads(optimizer) and self._backwards:  # else: another optimizer of this iteration
            if not self._roots and not self._root_searched:
                self._find_model(optimizer)
            self._count_step()

    def _find_model(self, optimizer: Any) -> None:
        """No DDP or FSDP module: the batch is counted at the model this optimizer steps (from
        the next step on), found once (model_root.py)."""
        self._root_searched = True
        root = find_root(optimizer, sys._getframe(1), self.torch.nn.Module)
        if root is not None:
            self._hook_root(root, batch_source(root))

    @_quiet
    def _remember_scaled(self, outputs: Any, result: Any) -> None:
        torch = self.torch
        if isinstance(outputs, torch.Tensor) and isinstance(result, torch.Tensor) and outputs.numel() == 1:
            self._scaled[id(result)] = (result, outputs.detach())

    @_quiet
    def _after_scaler_step(self, optimizer: Any) -> None:
        # The optimizer did not step (inf or NaN gradients), so its hook did not count: still a step.
        if self._backwards and self._leads(optimizer):
            self._count_step()

    def _count_step(self) -> None:
        if self.reporter is None and not self._see_group():
            self._become_rank(0, 1)  # a step with no process group: a job of one process
        counting = time.perf_counter()
        flops = self._flops.total(self._clock.aside) if self._flops is not None else None
        aside_s = (
            time.perf_counter() - counting if self._flops is not None and self._flops.counted_now else 0.0
        )
        now = time.time()
        self.steps += 1
        self._backwards = 0
        self._scaled.clear()
        losses, self._losses = self._losses, []
        data_s = (
            None if self._first_forward_at is None else max(0.0, self._first_forward_at - self._last_step_at)
        )
        samples, tokens, source = self._samples, self._tokens, self._batch_source
        if not samples and self._loader_samples:  # no model's forward counted them: the loader's
            samples, tokens, source = self._loader_samples, self._loader_tokens, LOADER_SOURCE
        parts: dict[str, float] | None = self._clock.cut()
        if self.steps == 1:
            parts = None  # the first step's holds everything since the watch started
        memory, loss = self._memory(), self._loss_of(losses)
        step = _Step(self.steps, now, samples, tokens, data_s, memory, loss, parts, flops, aside_s)
        self._samples = self._tokens = self._loader_samples = self._loader_tokens = 0
        self._first_forward_at = None
        self._last_step_at = now
        self._pending.append(step)
        self._write_ready(wait=len(self._pending) > MAX_PENDING)
        if (
            not self._about_said
            or (step.samples and not self._batch_said)
            or (self._flops and self._flops.news)
        ):
            self._say_about(step.samples, source)

    # ---- figures ------------------------------------------------------------------------

    def _loss_of(self, losses: list[Any]) -> Any:
        if not losses:
            return None
        torch = self.torch
        try:
            total = losses[0].float() if len(losses) == 1 else torch.stack([x.float() for x in losses]).sum()
            if total.device.type != "cuda":
                return float(total)
            copy = torch.empty((), dtype=torch.float32, pin_memory=True)
            copy.copy_(total, non_blocking=True)
            done = torch.cuda.Event()
            done.record()
            return copy, done
        except Exception:  # noqa: BLE001 (an odd loss, a device gone: the step is still counted)
            return None

    def _memory(self) -> tuple[int | None, int | None]:
        torch = self.torch
        device = self._device
        if device is not None and device.type == "cuda" and torch.cuda.is_initialized():
            return torch.cuda.memory_allocated(device), torch.cuda.max_memory_allocated(device)
        try:
            with open("/proc/self/statm", "rb") as f:
                rss = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, IndexError):
            rss = None
        return rss, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    def _write_ready(self, wait: bool = False) -> None:
        """Write the steps whose loss is known, in order (``wait``: the oldest, whatever it takes)."""
        while self._pending:
            step = self._pending[0]
            if isinstance(step.loss, tuple):
                copy, done = step.loss
                if not (wait or done.query()):
                    return
                done.synchronize()
                step.loss = float(copy)
            self._pending.popleft()
            wait = False
            mem, peak = step.mem
            if mem is not None and peak is not None:
                peak = max(peak, mem)  # the kernel's peak RSS lags its current one a little
            if self.reporter is None or self.reporter.script_reports_steps:
                continue
            self.reporter.step(
                step.step,
                samples=step.samples,
                tokens=step.tokens,
                loss=step.loss,
                mem_bytes=mem,
                mem_peak_bytes=peak,
                data_s=step.data_s,
                parts=step.parts,
                at=step.at,
                flops=step.flops,
                aside_s=step.aside_s,
            )
            self._last_event_at = time.monotonic()

    def _say_about(self, batch: int, source: str | None = None) -> None:
        self._about_said = True
        torch = self.torch
        device, uuid = "unknown", None
        if self._device is None:
            # No loss seen (no backward yet, or none at all): a process that never started CUDA ran
            # on the CPU; one that did may have used either, so it is not said (a script that failed
            # in its first forward on a GPU was called a CPU run).
            device = "unknown" if torch.cuda.is_initialized() else "cpu"
        elif self._device.type == "cuda" and torch.cuda.is_initialized():
            index = self._device.index if self._device.index is not None else torch.cuda.current_device()
            device, uuid = f"cuda:{index}", f"GPU-{torch.cuda.get_device_properties(index).uuid}"
        else:
            device = str(self._device)
        self._see_group()
        backend = backend_for(self._backend, device)
        fields: dict[str, Any] = {"device": device, "device_uuid": uuid, "backend": backend}
        if batch and source:
            fields.update(batch=batch, batch_source=source)
            self._batch_said = True
        if self._loader_workers is not None:
            fields["loader_workers"] = self._loader_workers
        if device.startswith("cuda:"):
            fields["device_name"] = torch.cuda.get_device_name(int(device.split(":")[1]))
        counted = self._flops
        if counted is not None:
            counted.news = False
            if counted.precision is not None:
                fields["precision"] = counted.precision
            if counted.note is not None:
                fields["flops_note"] = counted.note
        if self.reporter is not None:
            self.reporter.about(**fields)

    # ---- the end ---------------------------------------------------------------------------

    def finish(self) -> dict[str, Any]:
        """Write what is still pending; the facts of the end for the ``done`` event. The beat thread is
        joined first: nothing of mgpu-tui may still call into torch while the interpreter shuts down."""
        self._stop_beats()
        if self.torch is None:
            return {"process_group": "none"}
        try:
            while self._pending:
                self._write_ready(wait=True)
        except Exception:  # noqa: BLE001 (a GPU that failed cannot give the last losses: the end is still told)
            self._pending.clear()
        alive = self._see_group()
        if alive and self.reporter is not None:
            self.reporter.dump_flight_records()
        if not self._about_said:
            self._say_about(0)
        _, peak = self._memory()
        group = "alive" if alive else ("destroyed" if self._backend else "none")
        return {"process_group": group, "mem_peak_bytes": peak}

    def _see_group(self) -> bool:
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
                self._clock.distributed = int(dist.get_world_size()) > 1  # its backward may wait for others
            if alive and self.reporter is None:
                self._become_rank(int(dist.get_rank()), int(dist.get_world_size()))
        except Exception:  # noqa: BLE001 (a group torn down between the two calls)
            return False
        return alive

    # ---- beats ------------------------------------------------------------------------------

    def _watch_stack(self) -> None:
        main = threading.main_thread().ident
        last = None
        while not self._stopped.wait(BEAT_S):
            # The main thread's frames are read and let go at once, never held until the next beat:
            # a frame kept alive keeps its locals alive, and code that counts on a local's end then
            # sees it end at a random moment, on this thread. torch's DDPOptimizer does: a guard's
            # __del__ turns off its compile state, so torch.compile of a DDP model failed on a GPU
            # ("Cannot access data pointer of Tensor") when a beat had held an earlier frame.
            now, where = signature(main_frame(main), self.program)
            moved = last is not None and now != last
            last = now
            if moved and time.monotonic() - self._last_event_at >= BEAT_S and self.reporter is not None:
                self.reporter.beat(where)
                self._last_event_at = time.monotonic()
            if self._backend is None and self.torch is not None:
                self._see_group()  # a script that destroys its group before it ends still named it


def _first_tensor(values: tuple, depth: int = 0) -> Any:
    """The first tensor among ``values`` (looking into lists, tuples and dicts, not deeply)."""
    for value in values:
        if hasattr(value, "dim") and hasattr(value, "shape") and hasattr(value, "is_floating_point"):
            return value
        if depth < 2 and isinstance(value, (list, tuple)):
            found = _first_tensor(tuple(value), depth + 1)
        elif depth < 2 and isinstance(value, dict):
            found = _first_tensor(tuple(value.values()), depth + 1)
        else:
            continue
        if found is not None:
            return found
    return None
