"""Report files the headless commands write (--json, --junit, --out): checked early, written whole."""

from __future__ import annotations

import os
from pathlib import Path

from mgpu_tui.errors import UsageError


def ensure_writable(path: str) -> None:
    """Refuse a path that cannot be written before spending minutes on runs (UsageError: exit 2)."""
    target = Path(path)
    if target.is_dir():
        raise UsageError(f"{path} is a folder; give a file name.")
    parent = target.parent.resolve()
    while not parent.exists():
        parent = parent.parent
    if not os.access(parent, os.W_OK):
        raise UsageError(f"cannot write {path}: permission denied.")


def write_atomic(path: str | Path, data: str | bytes) -> None:
    """Write a report; the parent folder is made if needed. Raises OSError."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    if isinstance(data, bytes):
        tmp.write_bytes(data)
    else:
        tmp.write_text(data)
    tmp.replace(target)  # a reader never sees half a file
