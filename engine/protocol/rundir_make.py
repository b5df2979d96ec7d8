"""Making a run folder: ``<root>/<UTC timestamp>-<mode>`` (``-2``, ``-3``... for runs started in
the same second), or the one folder the nodes of a job share, named from anyone's job id without
ever becoming a path (folder_name); the owner's alone (mode 0700); a root that is a dangling link,
a file, or not writable gets its sentence (RunDirError). rundir.py, the layout inside a run
folder, imports this; this imports nothing of it but its type."""

from __future__ import annotations

import datetime as dt
import errno
import hashlib
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mgpu_tui.engine.protocol.rundir import RunDir


NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")  # a job id as a folder's name: never a path
_NOT_IN_A_NAME = re.compile(r"[^A-Za-z0-9._-]")


def folder_name(job_id: str) -> str:
    """A job id (torchrun's --rdzv-id, anyone's text) as the name of one folder inside the run root:
    itself when it is a NAME; else its letters, digits, '.', '_' and '-' (others as '_'), prefixed
    'job-' and suffixed with a short hash of the whole id, so ``../../etc`` stays inside and two
    different ids never share a folder."""
    if NAME.fullmatch(job_id):
        return job_id
    kept = _NOT_IN_A_NAME.sub("_", job_id)[:40].strip("._")
    return f"job-{kept}-{hashlib.sha256(job_id.encode('utf-8', 'replace')).hexdigest()[:8]}"


class RunDirError(OSError):
    """The run directory cannot be created or written."""


def make_run_dir(
    cls: type[RunDir],
    root: str | os.PathLike,
    mode: str,
    now: dt.datetime | None = None,
    *,
    node: int | None = None,
    shared: str | None = None,
) -> RunDir:
    """A new, empty run folder of class ``cls`` (RunDir.create says what it is)."""
    now = now or dt.datetime.now(dt.timezone.utc)
    stem = f"{now.strftime('%Y%m%dT%H%M%SZ')}-{mode}"
    root = Path(root)
    if root.is_symlink() and not root.exists():
        raise RunDirError(f"{root} is a symbolic link to {os.readlink(root)}, which does not exist.")
    if root.exists() and not root.is_dir():
        raise RunDirError(f"{root} is a file, not a folder for runs.")
    try:
        root.mkdir(parents=True, exist_ok=True)
        if shared is not None:
            run = cls(root / f"{folder_name(shared)}-{mode}", node)
            run.path.mkdir(mode=0o700, exist_ok=True)
            run.events_dir.mkdir(parents=True, exist_ok=True)
            if run.spec_path.exists():
                raise RunDirError(f"{run.path} already holds node {node}'s files; use a new --rdzv-id.")
            return run
        for n in range(1, 1000):
            path = root / (stem if n == 1 else f"{stem}-{n}")
            try:
                path.mkdir(mode=0o700)  # logs and environment changes: the owner's alone
            except FileExistsError:
                continue
            run = cls(path, node)
            run.events_dir.mkdir()
            return run
    except OSError as exc:
        reason = exc.strerror or str(exc)
        if exc.errno in (errno.EACCES, errno.EROFS, errno.EPERM):
            reason = "permission denied" if exc.errno != errno.EROFS else "read-only file system"
        raise RunDirError(f"cannot create a run directory under {root}: {reason}.") from None
    raise RunDirError(f"too many runs named {stem} under {root}.")
