"""The bootstrap: what each rank of a script run starts with, so that an unchanged script reports.

    python -m mgpu_tui.engine.rank.bootstrap SCRIPT [ARG...]      (torchrun: -m mgpu_tui...bootstrap)
    python -m mgpu_tui.engine.rank.bootstrap -m MODULE [ARG...]

The script then runs as ``__main__`` as Python itself would run it: its own ``sys.argv``, its
folder first on ``sys.path`` (the current folder for a module), its ``__file__`` and ``__spec__``
(None for a script). Before it, the bootstrap says hello (so the engine can ask the rank for its
stacks and flight records from the start) and installs the script watch (script_watch.py), whose
hooks go into torch when the script imports it. After it:

- the script returned (or exited with 0): ``done`` with the steps it took and whether its process
  group is still up. A crash of the interpreter after this (gloo's teardown race) is then an abort
  at exit of a finished training, and is said so (engine/run/causes/rootcause.py).
- an exception ended it: ``error`` with its type, its first line, its whole message and its
  traceback (the bootstrap's own frames taken out, torch's ``[rankN]:`` prefixes never in it); then
  it is printed and the process exits with 1, as Python would have.

Without ``MGPU_RUN_DIR`` (not under mgpu-tui) the script just runs.
"""

from __future__ import annotations

import builtins
import importlib.machinery
import os
import runpy
import sys
import traceback
import types
from types import TracebackType

from mgpu_tui.engine.protocol.environment import RUN_DIR_ENV
from mgpu_tui.engine.rank.watch.memory.watch import failure_fields
from mgpu_tui.engine.rank.watch.script_watch import ScriptReporter, ScriptWatch

USAGE = "usage: python -m mgpu_tui.engine.rank.bootstrap (SCRIPT | -m MODULE) [ARG...]"
_OWN_FILES = {os.path.abspath(__file__), getattr(runpy, "__file__", ""), "<frozen runpy>"}


def _not_ours(tb: TracebackType | None) -> TracebackType | None:
    """The traceback from the script's first frame: the bootstrap's and runpy's left out."""
    while tb is not None and tb.tb_frame.f_code.co_filename in _OWN_FILES:
        tb = tb.tb_next
    return tb


def describe(exc: BaseException, tb: TracebackType | None = None) -> dict[str, str]:
    """The error event's fields for an exception: its qualified type, its first line (the
    headline), every line of its message, and its traceback (chained exceptions included; from
    ``tb`` on where given, the exception itself unchanged)."""
    kind = type(exc)
    name = kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
    try:
        text = str(exc)
    except Exception as inner:  # noqa: BLE001 (an exception whose __str__ raises: it is still told)
        text = f"<its message could not be read: {type(inner).__name__}>"
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    lines = traceback.format_exception(kind, exc, tb if tb is not None else _not_ours(exc.__traceback__))
    return {
        "message": f"{kind.__name__}: {first}" if first else kind.__name__,
        "traceback": "".join(lines),
        "type": name,
        "whole_message": text,
    }


def _run(program: str, is_module: bool, args: list[str]) -> None:
    sys.argv = [program, *args]
    if is_module:  # runpy puts the module's file in argv[0] and its spec in __spec__, as `python -m` does
        runpy.run_module(program, run_name="__main__", alter_sys=True)
        return
    path = os.path.abspath(program)
    sys.path[0] = os.path.dirname(path)  # `python script.py` puts the script's folder first
    if not os.path.isfile(path):  # a folder or a zip with a __main__.py: runpy knows those
        runpy.run_path(program, run_name="__main__")
        return
    # As Python's own main: argv[0] as typed, __file__ absolute, no __spec__, no __cached__
    # (runpy.run_path would make argv[0] absolute too).
    with open(path, "rb") as f:
        code = compile(f.read(), path, "exec", dont_inherit=True)
    main = types.ModuleType("__main__")
    main.__dict__.update(__file__=path, __cached__=None, __spec__=None, __builtins__=builtins,
                         __loader__=importlib.machinery.SourceFileLoader("__main__", path))  # fmt: skip
    sys.modules["__main__"] = main
    exec(code, main.__dict__)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    is_module = bool(argv) and argv[0] == "-m"
    if is_module:
        argv = argv[1:]
    if not argv:
        raise SystemExit(USAGE)
    program, args = argv[0], argv[1:]
    watch = reporter = None
    if os.environ.get(RUN_DIR_ENV):
        reporter = ScriptReporter(print_every=10**9)
        reporter.hello(mode="script", device="unknown", config={"program": program, "args": args[:64]})
        watch = ScriptWatch(reporter, program)
        reporter.follow_thread(lambda: watch.training_thread)  # its stacks: the training thread first
        watch.start()
        os.register_at_fork(after_in_child=watch.after_fork_in_child)  # a data-loader worker is no rank
    try:
        _run(program, is_module, args)
    except SystemExit as exc:
        if watch is not None and reporter is not None:
            if exc.code in (None, 0):
                reporter.done(watch.steps, **watch.finish())
            else:
                watch.finish()
                message = exc.code if isinstance(exc.code, str) else f"exited with code {exc.code}"
                reporter.error(f"SystemExit: {message}", "", type="SystemExit", whole_message=str(message))
            reporter.close()
        raise
    except KeyboardInterrupt:
        if watch is not None and reporter is not None:
            watch.finish()
            reporter.close()
        raise
    except BaseException as exc:  # noqa: BLE001 (every way a script can end is told, then passed on)
        if watch is not None and reporter is not None:
            watch.finish()
            reporter.error(**describe(exc), **failure_fields(watch, exc))
            reporter.close()
        # As Python prints it (through torch's excepthook, which prefixes the rank, if the script
        # made a process group), from the script's first frame; then exit 1, as Python would.
        exc.with_traceback(_not_ours(exc.__traceback__))  # the hook prints the exception's own
        sys.excepthook(type(exc), exc, exc.__traceback__)
        sys.stderr.flush()
        raise SystemExit(1) from None
    if watch is not None and reporter is not None:
        reporter.done(watch.steps, **watch.finish())
        reporter.close()


if __name__ == "__main__":
    main()
