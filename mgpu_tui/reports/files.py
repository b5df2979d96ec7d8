"""Files a user names: reports the headless commands write (checked early, written whole), and
inputs they read (bounded, never blocking)."""

from __future__ import annotations

import os
import stat
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
    """Write a report whole or not at all; the parent folder is made if needed. Raises OSError
    (a full disk, say), and then leaves no temporary file behind."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        if isinstance(data, bytes):
            tmp.write_bytes(data)
        else:
            tmp.write_text(data)
        tmp.replace(target)  # a reader never sees half a file
    except OSError:
        tmp.unlink(missing_ok=True)
        raise


def read_bounded(path: str, limit: int, what: str) -> str:
    """The text of a regular file a user named, if it is at most ``limit`` bytes.

    A FIFO, a device (/dev/zero) or a folder is refused before it is opened, so reading
    never blocks or runs without end. Raises UsageError with one sentence.
    """
    try:
        info = os.stat(path)
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}.") from None
    if not stat.S_ISREG(info.st_mode):
        raise UsageError(f"{path} is not a regular file; give the saved {what}.")
    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1)
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}.") from None
    if len(data) > limit:
        raise UsageError(f"{path} is over {limit // 1024} KiB; that is not {what}.")
    return data.decode("utf-8", "replace")
