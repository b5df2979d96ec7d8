"""Running a comparison: its specs one after another (or at once, each on its own GPUs), a row
kept per finished run, and every run stopped when the comparison is."""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence

from mgpu_tui.engine.compare.comparison import Comparison, row_from_run
from mgpu_tui.engine.launch.errors import SpecError
from mgpu_tui.engine.launch.spec import LaunchSpec, resolve
from mgpu_tui.engine.machine import host as host_module
from mgpu_tui.engine.machine import nvml
from mgpu_tui.engine.run.lifecycle import Run


class Runner:
    """Runs a list of specs (one after another, or at once) and keeps a row per finished run."""

    def __init__(
        self,
        specs: Sequence[LaunchSpec],
        comparison: Comparison,
        *,
        host: host_module.Host,
        on_update: Callable[[Comparison, Sequence[Run]], None] | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.specs = [dataclasses.replace(spec, comparison=comparison.id) for spec in specs]  # its rows
        self.comparison = comparison
        self.host = host
        self.on_update = on_update or (lambda comparison, running: None)
        self.environ = dict(os.environ if environ is None else environ)
        self.running: list[Run] = []
        self._stop = threading.Event()
        self._gpu_name = None
        if host.has_cuda and nvml.status().ok:
            try:
                self._gpu_name = nvml.identity(0).name  # for MFU; without it MFU is n/a
            except (nvml.NvmlCallFailed, nvml.GpuLost):
                self._gpu_name = None

    def check(self) -> None:
        """Refuse, before anything runs, a spec that cannot run here (SpecError: exit 2)."""
        for spec in self.specs:
            resolve(spec, self.host)
        if self.comparison.parallel:
            self._gpu_sets()

    def _gpu_sets(self) -> list[list[int] | None]:
        """Disjoint GPU indices per spec for --parallel on CUDA; None on the CPU."""
        sets: list[list[int] | None] = []
        taken = 0
        for spec in self.specs:
            resolved = resolve(spec, self.host)
            if resolved.device != "cuda":
                sets.append(None)
                continue
            need = resolved.mode.gpus_needed(resolved.nproc, spec.stages)
            sets.append(list(range(taken, taken + need)))
            taken += need
        if taken > self.host.gpu_count:
            raise SpecError(
                f"--parallel needs {taken} GPUs for these modes side by side, "
                f"but {self.host.gpu_count} are visible."
            )
        return sets

    def _environ_for(self, gpus: list[int] | None) -> dict[str, str]:
        if gpus is None:
            return self.environ
        visible = self.environ.get("CUDA_VISIBLE_DEVICES")
        names = [e.strip() for e in visible.split(",")] if visible else [str(i) for i in range(64)]
        return {**self.environ, "CUDA_VISIBLE_DEVICES": ",".join(names[i] for i in gpus)}

    def _host_for(self, gpus: list[int] | None) -> host_module.Host:
        if gpus is None:
            return self.host
        return dataclasses.replace(self.host, gpu_count=len(gpus))

    def stop(self) -> None:
        """Ask :meth:`run` (in another thread) to stop every rank and return; later modes do not start."""
        self._stop.set()

    def run(self) -> Comparison:
        try:
            if self.comparison.parallel:
                self._run_together()
            else:
                for spec in self.specs:
                    if self._stop.is_set():
                        break
                    self._run_together([spec])
            self.comparison.interrupted = self._stop.is_set()
        except KeyboardInterrupt:
            self.comparison.interrupted = True
            raise
        finally:
            self.close()
            self.comparison.ended_at = time.time()
        return self.comparison

    def _run_together(self, specs: Sequence[LaunchSpec] | None = None) -> None:
        if specs is None:
            specs, gpu_sets = self.specs, self._gpu_sets()
        else:
            gpu_sets = [None] * len(specs)
        self.running = [
            Run.prepare(spec, self._host_for(gpus), environ=self._environ_for(gpus))
            for spec, gpus in zip(specs, gpu_sets)
        ]
        for run in self.running:
            run.start()
        if len(self.running) == 1:
            self._wait_one(self.running[0])
            self.running = []
            return
        pending = list(self.running)
        while pending:
            if self._stop.is_set():
                for run in pending:
                    run.stop()
            for run in list(pending):
                if run.poll().finished:
                    pending.remove(run)
                    self.comparison.rows.append(
                        row_from_run(run, gpu_count=self.host.gpu_count, gpu_name=self._gpu_name)
                    )
            self.on_update(self.comparison, pending)
            if pending:
                self._stop.wait(0.2)
        self.running = []

    def _wait_one(self, run: Run) -> None:
        """One run: sleep on its exit (Run.wait), so the next starts the moment this one ends."""

        def polled(run: Run) -> None:
            if self._stop.is_set() and not run.state.finished:
                run.stop()
            self.on_update(self.comparison, [] if run.state.finished else [run])

        run.wait(interval=0.5, on_poll=polled)
        self.comparison.rows.append(row_from_run(run, gpu_count=self.host.gpu_count, gpu_name=self._gpu_name))
        self.on_update(self.comparison, [])

    def close(self) -> None:
        for run in self.running:
            run.close()
        self.running = []
