"""The watch of one Python process of a command run by ``mgpu-tui exec``.

``mgpu-tui exec -- COMMAND`` runs the command as given (no torchrun around it) and reaches every
Python process of its tree through the ``sitecustomize`` it puts first on their PYTHONPATH
(engine/rank/sitewatch/sitecustomize.py), which calls :func:`start` once the process imports
torch. Here:

- the script watch (script_watch.py) puts its hooks into torch, and nothing else happens: no
  thread, no file. Launcher agents, data-loader and compile workers import torch too, and stay
  no one.
- **Who is a rank, who a trainer.** A process becomes a rank when it joins the default process
  group (its rank and world size are the group's, however it was made: ``init_process_group``,
  ``init_device_mesh``, Lightning's or DeepSpeed's own calls): it says hello, with its pid, in
  ``events/rank<N>.jsonl``. A process that steps an optimizer after a backward with no group
  (Hogwild's trainers, a pool's workers, a learning-rate finder before the job) is a **trainer**
  of its own: its events go to ``events/trainer<PID>.jsonl``, never into a rank's. A trainer that
  then joins a group ends its training there (``done``) and is a rank from then on. The engine
  believes a pid only for a process of the command's tree (engine/launch/processes.py).
- **A fork** (``os.register_at_fork``): the child starts as no one, without its parent's file,
  stack handler, threads or counts.
- **How a training ends.** mp.spawn's children catch their own exception and exit (torch's
  ``multiprocessing.spawn._wrap``): the exception is told (``error``, whole) before they do. A
  process of ``multiprocessing`` (``Process``, a ``Pool``'s worker: fork, spawn or forkserver)
  has its exception caught by multiprocessing itself, which prints it and exits 1 (with fork
  through ``os._exit``: no exit handler runs): the end is told from multiprocessing's own last
  call in the child (``util._exit_function``, which runs while the exception is in flight). A
  pool's task is a training of its own: its end is told when the task returns or raises, and the
  worker's next task that trains is a new trainer. An exception that ends the main thread is told
  at exit (Python keeps it in ``sys.last_value``). An interrupt (Ctrl-C) says nothing: the
  training did not end on its own. Otherwise ``done``, with the steps and whether the group is
  still up.
"""

from __future__ import annotations

import atexit
import functools
import multiprocessing
import os
import sys
from types import ModuleType, TracebackType
from typing import Any

from mgpu_tui.engine.rank.bootstrap import describe
from mgpu_tui.engine.rank.watch.memory.watch import failure_fields, rank_at_failure
from mgpu_tui.engine.rank.watch.script_watch import ScriptReporter, ScriptWatch
from mgpu_tui.engine.rank.watch.torch_hooks import after_import
from mgpu_tui.engine.rank.watch.wrapping import around, rebind

_watch: ScriptWatch | None = None
_MULTIPROCESSING = os.path.dirname(os.path.abspath(multiprocessing.__file__))


def start(torch: ModuleType) -> None:
    """Watch this process (once): called by the sitecustomize right after ``import torch``."""
    global _watch
    if _watch is not None:
        return
    main = sys.modules.get("__main__")
    program = getattr(main, "__file__", None) or (sys.argv[0] if sys.argv else "") or "python"
    _watch = ScriptWatch(None, program, become=_become)
    _watch.ended = _end_training
    _watch.start()
    os.register_at_fork(after_in_child=_after_fork_in_child)
    atexit.register(_at_exit)
    _tell_spawned_errors(torch)
    _tell_process_ends()
    after_import("multiprocessing.pool", _tell_pool_tasks)


def _become(rank: int | None, world_size: int) -> ScriptReporter:
    """This process's reporter, once it is a rank (or, ``rank`` None, a trainer of its own)."""
    local = os.environ.get("LOCAL_RANK", "")  # a launcher's word: a hint, shown, never trusted
    own = 0 if rank is None else rank
    reporter = ScriptReporter(
        rank=own,
        world_size=world_size,
        local_rank=int(local) if local.isdigit() and rank is not None else own,
        print_every=10**9,
        trainer=rank is None,
    )
    argv = list(sys.argv)
    config: dict[str, Any] = {"program": argv[0] if argv else "", "args": argv[1:64]}
    if rank is None:  # which of the command's processes trains: "Process-1", "ForkPoolWorker-2"
        config["process"] = multiprocessing.current_process().name[:80]
    reporter.hello(mode="script", device="unknown", config=config)
    reporter.follow_thread(lambda: _watch.training_thread if _watch is not None else None)
    return reporter


def _after_fork_in_child() -> None:
    if _watch is not None:
        _watch.after_fork_in_child()


def _tell_spawned_errors(torch: ModuleType) -> None:
    """mp.spawn's children run ``_wrap(fn, i, args, error_queue)``, which catches the function's
    exception, queues its text for the parent and exits with 1: the exception is told here first,
    whole, by the rank it ended. ``_wrap`` is replaced under its own name, so the parent pickles and
    the child finds the same function; what it does is torch's own. A trainer that starts a job's
    processes (mp.spawn, start_processes: a learning-rate finder, then the job) ends its training
    there: what its process does after (waits for the job, raises its failure) is the job's."""
    spawn = sys.modules.get("torch.multiprocessing.spawn")
    starts = getattr(spawn, "start_processes", None)
    if starts is not None and getattr(starts, "__wrapped__", None) is None:
        rebind(starts, around(starts, before=lambda args, kwargs: _job_starts()))
    original = getattr(spawn, "_wrap", None)
    if original is None or getattr(original, "__wrapped__", None) is not None:
        return

    @functools.wraps(original)
    def _wrap(fn: Any, *args: Any, **kwargs: Any) -> Any:
        return original(_telling(fn), *args, **kwargs)

    spawn._wrap = _wrap  # type: ignore[union-attr]


def _job_starts() -> None:
    if _watch is not None and _watch.trainer:
        _end_training(None)


def _telling(fn: Any) -> Any:
    @functools.wraps(fn)
    def telling(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            if exc.__traceback__ is not None:  # from the script's frame on, as it would be bare
                exc = exc.with_traceback(exc.__traceback__.tb_next)
            _end(exc)
            raise
        except KeyboardInterrupt as exc:  # torch's _wrap swallows it: the rank did not finish
            _end(exc)
            raise

    return telling


def _tell_process_ends() -> None:
    """A process of multiprocessing (mp.Process, a pool's worker) ends in its ``_bootstrap``, which
    catches the target's exception, prints it and returns 1 (with fork, ``os._exit`` follows: no
    exit handler runs). Its last call there, ``util._exit_function``, runs with the exception still
    in flight: the end is told from it (the exception, whole, whatever the parent's exit code)."""
    util = sys.modules.get("multiprocessing.util")
    original = getattr(util, "_exit_function", None)
    if original is None or getattr(original, "__wrapped__", None) is not None:
        return

    @functools.wraps(original)
    def _exit_function(*args: Any, **kwargs: Any) -> Any:
        if multiprocessing.parent_process() is not None:  # a child's own run() is over
            _end(sys.exc_info()[1])
        return original(*args, **kwargs)

    util._exit_function = _exit_function  # type: ignore[union-attr]


def _tell_pool_tasks(pool: ModuleType) -> None:
    """A pool's worker runs task after task: each that trains is a trainer of its own (a sweep's
    trainings never mix in one), its end told when the task returns or raises. The worker function
    is replaced under its own name, so a spawned worker unpickles the same; what it does is
    multiprocessing's own, with each task's function wrapped as the worker takes it."""
    original = getattr(pool, "worker", None)
    if original is None or getattr(original, "__wrapped__", None) is not None:
        return

    @functools.wraps(original)
    def worker(inqueue: Any, *args: Any, **kwargs: Any) -> Any:
        return original(_Tasks(inqueue, pool), *args, **kwargs)

    pool.worker = worker  # type: ignore[attr-defined]


class _Tasks:
    """A pool worker's task queue, its tasks' functions told apart (``map``'s chunks item by item)."""

    def __init__(self, queue: Any, pool: ModuleType) -> None:
        self._queue, self._pool = queue, pool

    def get(self) -> Any:
        task = self._queue.get()
        if isinstance(task, tuple) and len(task) == 5:
            job, i, func, args, kwargs = task
            chunked = func in (getattr(self._pool, "mapstar", None), getattr(self._pool, "starmapstar", None))
            if chunked and len(args) == 1 and isinstance(args[0], tuple) and len(args[0]) == 2:
                args = ((_task(args[0][0]), args[0][1]),)
            elif not chunked:
                func = _task(func)
            task = (job, i, func, args, kwargs)
        return task

    def __getattr__(self, name: str) -> Any:
        return getattr(self._queue, name)


def _task(fn: Any) -> Any:
    @functools.wraps(fn)
    def task(*args: Any, **kwargs: Any) -> Any:
        try:
            result = fn(*args, **kwargs)
        except BaseException as exc:
            if _watch is not None and _watch.trainer:
                _end_training(exc)
            raise
        if _watch is not None and _watch.trainer:
            _end_training(None)
        return result

    return task


def _end_training(exc: BaseException | None) -> None:
    """A training ends and its process goes on (a pool's task, a trainer that joins a group)."""
    _end(exc)
    if _watch is not None:
        _watch.no_one()


def _users(tb: TracebackType | None) -> TracebackType | None:
    """A traceback from the script's first frame: multiprocessing's and this module's left out."""
    while tb is not None and _theirs(tb.tb_frame.f_code.co_filename):
        tb = tb.tb_next
    return tb


def _theirs(filename: str) -> bool:
    return filename == __file__ or filename.startswith(_MULTIPROCESSING)


def _end(exc: BaseException | None) -> None:
    """This process's training ends: its exception (``error``; a SystemExit of another code than
    0), an interrupt (no word: it did not end on its own), else ``done``. Told once; its reporter is
    closed, its threads stopped, whatever could be said."""
    watch = _watch
    reporter = watch.reporter if watch is not None else None
    if watch is None or reporter is None:
        return
    try:
        end = watch.finish()
        if isinstance(exc, SystemExit) and exc.code not in (None, 0):
            said = exc.code if isinstance(exc.code, str) else f"exited with code {exc.code}"
            reporter.error(f"SystemExit: {said}", "", type="SystemExit", whole_message=str(said))
        elif exc is None or isinstance(exc, SystemExit):
            reporter.done(watch.steps, **end)
        elif not isinstance(exc, KeyboardInterrupt):
            reporter.error(**describe(exc, _users(exc.__traceback__)), **failure_fields(watch, exc))
    except Exception:  # noqa: BLE001 (the end is the script's, told or not)
        pass
    finally:
        watch.reporter = None
        _close(reporter)


def _close(reporter: ScriptReporter) -> None:
    try:
        reporter.close()
    except Exception:  # noqa: BLE001 (nothing of the watch's reaches the script's exit)
        pass


def _at_exit() -> None:
    """The end of a rank: the exception that ended its main thread (Ctrl-C: no word), else done."""
    exc = getattr(sys, "last_exc", None) or getattr(sys, "last_value", None)
    if _watch is not None:
        rank_at_failure(_watch, exc)  # a job of one process out of memory before its first step
    _end(None if isinstance(exc, SystemExit) else exc)
