"""mgpu-tui's ``sitecustomize``: how ``mgpu-tui exec`` reaches every Python process of a command
it did not start itself (mp.spawn's children, a script that Lightning's launcher runs again,
accelerate's and DeepSpeed's workers), with no line of the user's changed.

``mgpu-tui exec`` puts this file's folder first on ``PYTHONPATH``; Python's ``site`` imports
``sitecustomize`` at start-up in every interpreter that inherits it. (A ``.pth`` file there is not
read, and the user site is off in virtual environments: this is the one route that needs no code.)
At start-up it:

1. runs the ``sitecustomize`` it shadows (the system's, a virtual environment's), as Python would;
2. registers one import hook, for ``torch``, and nothing else: no thread, no file, no import of
   mgpu-tui. A process that never imports torch (a shell's python, a tool) pays a dictionary
   lookup an import.

Once the process imports torch, it loads mgpu-tui's watch (engine/rank/watch/process_watch.py) from the
mgpu-tui that launched the command (``MGPU_WATCH_PATHS``), which puts its hooks into torch. The
process becomes a rank, and opens its files, only when it joins a process group or steps an
optimizer. Standard library only, and it never raises: a failure would print "Error in
sitecustomize" in every interpreter of the tree. An interpreter that cannot load mgpu-tui (another
Python version, say) runs as if it were not there.
"""

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
_PATHS_ENV = "MGPU_WATCH_PATHS"  # "mgpu_tui=DIR;mgpu_tui.engine=DIR": where mgpu-tui's code is
_RUN_DIR_ENV = "MGPU_RUN_DIR"


def _chain():
    """Run the sitecustomize this one shadows, as Python's site would have run it."""
    try:
        from importlib.machinery import PathFinder
        from importlib.util import module_from_spec

        path = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
        spec = PathFinder.find_spec("sitecustomize", path)
        if spec is None or spec.loader is None:
            return
        module = module_from_spec(spec)
        sys.modules["sitecustomize"] = module  # it is the sitecustomize: as if this one were not here
        spec.loader.exec_module(module)
    except Exception as exc:  # noqa: BLE001 (said as Python's site says it, and the process goes on)
        sys.stderr.write(
            f"Error in sitecustomize; set PYTHONVERBOSE for traceback:\n{type(exc).__name__}: {exc}\n"
        )


class _AfterTorch:
    """A finder at the head of ``sys.meta_path`` that lets the usual machinery find ``torch``, then
    runs mgpu-tui's watch once torch's own code has run. It asks nothing of any other import.

    It stays until torch's module has really been executed: a library that asks whether torch is
    there first (``importlib.util.find_spec("torch")``: transformers, accelerate, datasets do, at
    their import) gets a spec and imports nothing, and the real import that follows must still be
    seen. Every spec it hands out carries the watching loader; the first one executed removes it."""

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        for finder in sys.meta_path:
            if isinstance(finder, _AfterTorch):
                continue
            find = getattr(finder, "find_spec", None)
            if find is None:
                continue
            spec = find(name, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module") or isinstance(loader, _Loader):
            return spec
        spec.loader = _Loader(loader)
        return spec


class _Loader:
    def __init__(self, inner):
        self._inner = inner

    def create_module(self, spec):
        return self._inner.create_module(spec)

    def exec_module(self, module):
        self._inner.exec_module(module)
        _remove_finder()
        _watch(module)

    def __getattr__(self, name):
        return getattr(self._inner, name)


def _remove_finder():
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _AfterTorch)]


def _watch(torch):
    """mgpu-tui's watch into this process's torch; silent when mgpu-tui cannot be loaded here."""
    try:
        _load_paths()
        from mgpu_tui.engine.rank.watch import process_watch

        process_watch.start(torch)
    except BaseException:  # noqa: BLE001 (no figure is worth the user's import of torch)
        return


def _load_paths():
    """Where the launching mgpu-tui's packages are, for an interpreter that has none of its own."""
    paths = {}
    for item in os.environ.get(_PATHS_ENV, "").split(";"):
        name, _, folder = item.partition("=")
        if name in ("mgpu_tui", "mgpu_tui.engine") and os.path.isfile(os.path.join(folder, "__init__.py")):
            paths[name] = folder
    if "mgpu_tui" in sys.modules or len(paths) != 2:
        return
    from importlib.util import module_from_spec, spec_from_file_location

    for name in ("mgpu_tui", "mgpu_tui.engine"):
        folder = paths[name]
        spec = spec_from_file_location(
            name, os.path.join(folder, "__init__.py"), submodule_search_locations=[folder]
        )
        module = module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    sys.modules["mgpu_tui"].engine = sys.modules["mgpu_tui.engine"]


def _start():
    _chain()
    if not os.environ.get(_RUN_DIR_ENV):
        return  # a process of the tree that cleared its environment: not ours to watch
    if "torch" in sys.modules:
        _watch(sys.modules["torch"])
    else:
        sys.meta_path.insert(0, _AfterTorch())


try:
    _start()
except BaseException:  # noqa: BLE001 (never "Error in sitecustomize" for mgpu-tui's own part)
    pass
