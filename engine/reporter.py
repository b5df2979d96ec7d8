"""Deprecated home of the reporter: ``from mgpu_tui import Reporter`` is the documented import.

The first docs named ``mgpu_tui.engine.reporter``; scripts written against it keep working, with a
DeprecationWarning that names the import to use.
"""

import warnings

from mgpu_tui.engine.rank.reporter import Reporter

__all__ = ["Reporter"]

warnings.warn(
    "mgpu_tui.engine.reporter is deprecated: use `from mgpu_tui import Reporter`",
    DeprecationWarning,
    stacklevel=2,
)
