"""The watch of one Python process of a command run by ``mgpu-tui exec``.

``mgpu-tui exec -- COMMAND`` runs the command as given (no torchrun around it) and reaches every
Python process of its tree through the ``sitecustomize`` it puts first on their PYTHONPATH
(engine/rank/sitewatch/sitecustomize.py), which calls :func:`start` once the process imports
torch. Here:

- the script watch (script_watch.py) puts its hooks into torch, and nothing else happens: no
  thread, no file. Launcher agents, data-loader and compile workers import torch too, and stay
  no one.
- **Who is a rank.** A process becomes one when it joins the default process group (its rank
  and world size are the group's, however it was made: ``init_process_group``, ``init_device_mesh``,
  Lightning's or DeepSpeed's own calls), or when it steps an optimizer after a backward with no
  group (a job of one process: rank 0 of 1). Only then does it say hello, with its pid, in
  ``events/rank<N>.jsonl``: the engine maps the pid to the rank, and believes it only for a
  process of the command's tree (engine/launch/processes.py).
- **A fork** (``os.register_at_fork``): the child starts as no one, without its parent's file,
  stack handler, threads or counts; it becomes a rank of its own if it joins a group
  (``start_processes(start_method="fork")``).
- **How a rank ends.** mp.spawn's children catch their own exception and exit (torch's
  ``multiprocessing.spawn._wrap``): the exception is told (``error``, whole) before they do. An
  exception that ends the main thread is told at exit (Python keeps it in ``sys.last_value``);
  otherwise ``done``, with the steps and whether the group is still up.
"""

from __future__ import annotations

import atexit
import functools
import os
import sys
from types import ModuleType
from typing import Any

from mgpu_tui.engine.rank.bootstrap import describe
from mgpu_tui.engine.rank.watch.script_watch import ScriptReporter, ScriptWatch

_watch: ScriptWatch | None = None
_told = False  # this process's end was told (an error, before mp.spawn's child exits)


def start(torch: ModuleType) -> None:
    """Watch this process (once): called by the sitecustomize right after ``import torch``."""
    global _watch
    if _watch is not None:
        return
    main = sys.modules.get("__main__")
    program = getattr(main, "__file__", None) or (sys.argv[0] if sys.argv else "") or "python"
    _watch = ScriptWatch(None, program, become_rank=_become_rank)
    _watch.start()
    os.register_at_fork(after_in_child=_after_fork_in_child)
    atexit.register(_at_exit)
    _tell_spawned_errors(torch)


def _become_rank(rank: int, world_size: int) -> ScriptReporter:
    local = os.environ.get("LOCAL_RANK", "")  # a launcher's word: a hint, shown, never trusted
    reporter = ScriptReporter(
        rank=rank,
        world_size=world_size,
        local_rank=int(local) if local.isdigit() else rank,
        print_every=10**9,
    )
    argv = list(sys.argv)
    reporter.hello(
        mode="script",
        device="unknown",
        config={"program": argv[0] if argv else "", "args": argv[1:64]},
    )
    return reporter


def _after_fork_in_child() -> None:
    global _told
    _told = False
    if _watch is not None:
        _watch.after_fork_in_child()


def _tell_spawned_errors(torch: ModuleType) -> None:
    """mp.spawn's children run ``_wrap(fn, i, args, error_queue)``, which catches the function's
    exception, queues its text for the parent and exits with 1: the exception is told here first,
    whole, by the rank it ended. ``_wrap`` is replaced under its own name, so the parent pickles and
    the child finds the same function; what it does is torch's own."""
    spawn = sys.modules.get("torch.multiprocessing.spawn")
    original = getattr(spawn, "_wrap", None)
    if original is None or getattr(original, "__wrapped__", None) is not None:
        return

    @functools.wraps(original)
    def _wrap(fn: Any, *args: Any, **kwargs: Any) -> Any:
        return original(_telling(fn), *args, **kwargs)

    spawn._wrap = _wrap  # type: ignore[union-attr]


def _telling(fn: Any) -> Any:
    @functools.wraps(fn)
    def telling(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            if exc.__traceback__ is not None:  # from the script's frame on, as it would be bare
                exc = exc.with_traceback(exc.__traceback__.tb_next)
            _tell_error(exc)
            raise

    return telling


def _tell_error(exc: BaseException) -> None:
    global _told
    watch = _watch
    if watch is None or watch.reporter is None or _told:
        return
    _told = True
    try:
        watch.finish()
        watch.reporter.error(**describe(exc), **watch.failure_fields(exc))
    except Exception:  # noqa: BLE001 (the end is the script's, told or not)
        pass
    finally:
        _close(watch.reporter)


def _close(reporter: ScriptReporter) -> None:
    try:
        reporter.close()
    except Exception:  # noqa: BLE001 (nothing of the watch's reaches the script's exit)
        pass


def _at_exit() -> None:
    """The end of a rank: the exception that ended its main thread, else done."""
    global _told
    watch = _watch
    exc = getattr(sys, "last_exc", None) or getattr(sys, "last_value", None)
    if watch is not None and exc is not None and not _told:
        watch.rank_at_failure(exc)  # a job of one process that ran out of memory at its first step
    if watch is None or watch.reporter is None or _told:
        return
    if exc is not None and not isinstance(exc, (KeyboardInterrupt, SystemExit)):
        _tell_error(exc)
        return
    _told = True
    try:
        end = watch.finish()
        watch.reporter.done(watch.steps, **end)
    except Exception:  # noqa: BLE001
        pass
    finally:
        _close(watch.reporter)  # its thread stopped, whatever the end could not say
