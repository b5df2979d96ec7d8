"""mgpu-tui: see and compare every PyTorch multi-GPU strategy on your own machine.

The public API is what ``__all__`` names, and only that; it keeps working from one release to
the next (CHANGELOG.md says when something is added or deprecated):

- ``Reporter``: what a training script may add to tell mgpu-tui its steps, samples and loss
  (docs/your-script.md). An unchanged script needs none of it.
- ``__version__``: this release, as ``mgpu-tui --version`` prints it and every run records it.

Everything else (``mgpu_tui.engine``, ``mgpu_tui.app``, ``mgpu_tui.commands``, ...) is internal
and may change in any release. ``mgpu_tui.engine.rank.reporter.Reporter`` and the path the first
docs gave, ``mgpu_tui.engine.reporter``, still import the same class (the latter with a
DeprecationWarning).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.2.0.dev0"
__all__ = ["Reporter", "__version__"]

if TYPE_CHECKING:
    from mgpu_tui.engine.rank.reporter import Reporter


def __getattr__(name: str) -> Any:
    # Imported on first use: the command line imports this package at start-up and stays instant.
    if name == "Reporter":
        from mgpu_tui.engine.rank.reporter import Reporter

        return Reporter
    raise AttributeError(f"module 'mgpu_tui' has no attribute {name!r}")
