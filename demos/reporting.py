"""What a demo tells mgpu-tui, and the fault injection that rides on it.

:class:`Reporting` wraps the reporter a user's own script would use
(``mgpu_tui.engine.rank.reporter``): hello, one event per step with the step's memory,
done. It is also the hook of the fault injection (faults.py): a failure asked for at
step K happens right after step K-1 is reported (or after hello, for step 1), so the
demos' training loops carry no fault code at all.
"""

from __future__ import annotations

import argparse
import os
import resource

import torch

from mgpu_tui.demos import faults
from mgpu_tui.engine.rank.reporter import Reporter
from mgpu_tui.engine.rank.watch import step_clock

# The steps torch's MemTracker watches on the CPU: by the end of the second the optimizer's state
# exists and DDP has rebuilt its buckets under the tracker's eye, so the peak has come; watching
# costs a Python call per tensor operation, so it stops there.
TRACKED_STEPS = 3


class TensorPeak:
    """The peak of the live tensors' bytes on the CPU, where no allocator keeps one: torch's own
    MemTracker (torch.distributed._tools.mem_tracker), told of the module's and the optimizer's
    tensors that exist already, over the first TRACKED_STEPS steps."""

    def __init__(self, module: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
        from torch.distributed._tools.mem_tracker import MemTracker

        self.tracker: MemTracker | None = MemTracker()
        self.tracker.track_external(module, optimizer)

        # MemTracker keeps one forward and backward of each module at a time: with accumulation
        # (--accum) the model runs forward again within the step. Its figures are dropped (the peak
        # stays) as each outermost forward begins (the model, or what wraps it: DataParallel calls
        # the model inside its own forward), by global hooks registered before the tracker's own.
        depth = [0]

        def enter(_module: torch.nn.Module, _args) -> None:
            if depth[0] == 0 and self.tracker is not None:
                self.tracker.reset_mod_stats()
            depth[0] += 1

        def leave(_module: torch.nn.Module, _args, _output) -> None:
            depth[0] -= 1

        hooks = torch.nn.modules.module
        self._hooks = (
            hooks.register_module_forward_pre_hook(enter),
            hooks.register_module_forward_hook(leave, always_call=True),
        )
        self.tracker.__enter__()

    def after_step(self, last: bool) -> int | None:
        """Called after each step; ``last``: read the peak and stop watching (then it is returned)."""
        if self.tracker is None or not last:
            return None
        peak = sum(snap.get("Total", 0) for snap in self.tracker.get_tracker_snapshot("peak").values())
        self.stop()
        return int(peak)

    def stop(self) -> None:
        if self.tracker is not None:
            tracker, self.tracker = self.tracker, None
            tracker.__exit__(None, None, None)
            for hook in self._hooks:
                hook.remove()


def memory(device: torch.device) -> tuple[int, int]:
    """(current, peak) bytes: the caching allocator's on CUDA, the process's resident set on the CPU
    (the runtime, the allocator's slack and freed pages it kept included: TensorPeak counts tensors)."""
    if device.type == "cuda":
        return torch.cuda.memory_allocated(device), torch.cuda.max_memory_allocated(device)
    with open("/proc/self/statm") as f:
        rss_pages = int(f.read().split()[1])
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss_pages * os.sysconf("SC_PAGE_SIZE"), peak_kib * 1024


def state_bytes(module: torch.nn.Module, optimizer: torch.optim.Optimizer) -> int:
    """The bytes of the parameters, gradients and optimizer state this rank holds: for sharded
    tensors (FSDP, TP), only its local shard."""
    from torch.distributed.tensor import DTensor

    def size(t: torch.Tensor) -> int:
        local = t.to_local() if isinstance(t, DTensor) else t
        return local.numel() * local.element_size()

    total = 0
    for p in module.parameters():
        total += size(p) + (size(p.grad) if p.grad is not None else 0)
    for state in optimizer.state.values():
        total += sum(size(v) for v in state.values() if torch.is_tensor(v))
    return total


class Reporting:
    """``with Reporting(args, rank, device, task=task) as report:`` then ``report.hello``, ``report.step``,
    ``report.done``. ``device`` is where this rank's memory is counted."""

    def __init__(
        self, args: argparse.Namespace, rank: int = 0, device: torch.device | None = None, task=None
    ) -> None:
        """``task``: the demo's data (harness.SyntheticTask), whose time on each batch is reported."""
        self.args, self.rank, self.task = args, rank, task
        # Where memory is counted: this device, or (None) the first that hello names.
        self._memory_device = device
        self.reporter = Reporter()
        # What to measure after the first optimizer step (watch_state).
        self._state: tuple[torch.nn.Module, torch.optim.Optimizer] | None = None
        self._tensor_peak: TensorPeak | None = None  # on the CPU, over the first steps
        # Where each step's time goes, as a script's watch takes it apart (step_clock.py): the
        # backward and the optimizer from here, the batch here, the forward from watch_state.
        self.clock = step_clock.StepClock()
        self._timed = False  # its steps are taken apart once watch_state hooked the model
        step_clock.install(torch, self.clock)
        if task is not None:
            task.batch = step_clock.timed(self.clock, "data", task.batch)

    @property
    def device(self) -> torch.device:
        """Where this rank's memory is counted."""
        return self._memory_device or torch.device("cpu")

    def __enter__(self) -> Reporting:
        self.reporter.__enter__()
        faults.start_log_flood(self.args)
        return self

    def __exit__(self, *exc) -> None:
        self._state = None
        if self._tensor_peak is not None:
            self._tensor_peak.stop()
        self.reporter.__exit__(*exc)

    def hello(self, mode: str, *devices: torch.device | str, **config) -> None:
        """Say who this rank is: its mode, the devices it trains on (default: the one its memory is
        counted on; the first GPU among them names it to the app), and settings beyond its arguments."""
        devices = devices or (self.device,)
        if self._memory_device is None:
            # A one-process demo names its device here: its memory is the allocator's there. Counted
            # on the CPU instead, a single run on a GPU showed its process's resident set as its peak.
            self._memory_device = torch.device(devices[0])
        gpu = next((torch.device(d) for d in devices if torch.device(d).type == "cuda"), None)
        uuid = None if gpu is None else f"GPU-{torch.cuda.get_device_properties(gpu).uuid}"
        settings = {k: v for k, v in vars(self.args).items() if k not in ("save_params", "log_rate", "shape")}
        if getattr(self.args, "shape", None) is not None:
            settings["shape"] = self.args.shape.to_json()
        device = ",".join(map(str, devices))
        self.reporter.hello(mode=mode, device=device, device_uuid=uuid, config={**settings, **config})
        faults.maybe_fail(self.args, 1, self.rank, self.device)

    def watch_state(
        self, module: torch.nn.Module, optimizer: torch.optim.Optimizer, *, tensor_peak: bool = True
    ) -> None:
        """After the first step, report the bytes this rank holds of ``module``'s parameters, their
        gradients and ``optimizer``'s state: the planner's prediction is checked against them. On the
        CPU, the peak of the live tensors is watched from here (on CUDA the allocator keeps it)
        unless ``tensor_peak`` is False: where torch's MemTracker cannot follow the backward."""
        self._state = (module, optimizer)
        step_clock.hook_forward(module, self.clock, torch)
        self._timed = True
        dist = torch.distributed
        self.clock.distributed = dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
        if self.device.type == "cpu" and tensor_peak:
            self._tensor_peak = TensorPeak(module, optimizer)

    def timed(self, part: str, function):
        """``function``, its time told to ``part`` of the step (less the forward and backward run
        inside it): a pipeline schedule's waits for the other stages are communication."""
        return step_clock.timed(self.clock, part, function)

    def step(self, step: int, samples: int, loss) -> None:
        """Report a step; ``samples`` counts only samples new to the job (0 on TP peers and later
        pipeline stages), so no sample is counted twice."""
        current, peak = memory(self.device)
        parts = self.clock.cut()  # the first step's holds everything since the start: not told
        data_s = self.task.data_s if self.task is not None else None
        state = None
        if self._state is not None and step == 1:
            state = state_bytes(*self._state)
            # Measured once. Holding the model longer would keep a DDP model alive into the
            # interpreter's exit after a failure, where freeing it races gloo's threads.
            self._state = None
        if self.device.type == "cuda":
            tensor_peak: int | None = peak  # the caching allocator's: tensors, not the process
        elif self._tensor_peak is not None:
            tensor_peak = self._tensor_peak.after_step(last=step >= min(TRACKED_STEPS, self.args.steps))
        else:
            tensor_peak = None
        tokens = samples * self.args.shape.seq_len if getattr(self.args, "shape", None) else 0
        self.reporter.step(
            step,
            samples=samples,
            tokens=tokens,
            loss=loss,
            mem_bytes=current,
            mem_peak_bytes=peak,
            data_s=data_s,
            state_bytes=state,
            tensor_peak_bytes=tensor_peak,
            parts=parts if step > 1 and self._timed else None,
        )
        faults.maybe_fail(self.args, step + 1, self.rank, self.device)

    def done(self, steps: int) -> None:
        self.reporter.done(steps)
