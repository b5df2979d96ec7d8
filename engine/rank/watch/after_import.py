"""Run a function right after a module is first imported, whoever imports it.

The bootstrap (bootstrap.py) must patch torch before a script uses it, without importing torch
itself: a script that never imports torch must not pay for it, nor see it in ``sys.modules``. So a
finder at the head of ``sys.meta_path`` lets the normal machinery find the module, then wraps its
loader so that ``then(module)`` runs once the module's own code has run. A module already imported
gets ``then`` at once.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

Then = Callable[[ModuleType], None]


class _Loader(importlib.abc.Loader):
    """The module's own loader, with ``then`` after its ``exec_module``; everything else delegated."""

    def __init__(self, inner: Any, then: Then) -> None:
        self._inner, self._then = inner, then

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._inner.exec_module(module)
        self._then(module)

    def __getattr__(self, name: str) -> Any:  # get_resource_reader, is_package, get_source, ...
        return getattr(self._inner, name)


class _Finder(importlib.abc.MetaPathFinder):
    def __init__(self) -> None:
        self.waiting: dict[str, list[Then]] = {}

    def find_spec(self, name: str, path: Any = None, target: ModuleType | None = None):
        if name not in self.waiting:
            return None
        thens = self.waiting.pop(name)
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is None:  # a namespace package: nothing runs, so nothing to wait for
            self.waiting[name] = thens
            return None

        def then_all(module: ModuleType) -> None:
            for then in thens:
                then(module)

        spec.loader = _Loader(spec.loader, then_all)
        return spec


_finder = _Finder()


def after_import(name: str, then: Then) -> None:
    """Call ``then(module)`` once ``name`` is imported (at once, if it already is)."""
    module = sys.modules.get(name)
    if module is not None:
        then(module)
        return
    if _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)
    _finder.waiting.setdefault(name, []).append(then)
