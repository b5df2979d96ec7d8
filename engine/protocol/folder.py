"""The one reader of a run folder's files, and the one way the engine writes its own there.

The ranks are the user's code and can write every file of their run folder (docs/architecture.md,
"The trust boundary"): a file may be a FIFO, a device, a link to somewhere else, a hard link to
another run's file, gigabytes long, JSON nested a million deep, or numbers no figure can mean.
So every read of a run folder's file comes through here:

- opened below the run folder component by component, each with ``O_NOFOLLOW`` (``O_NOFOLLOW``
  on the whole path would guard only its last component), ``O_NONBLOCK`` (a FIFO never blocks
  the open) and ``O_NOCTTY``; then ``fstat``: regular files only;
- at most a bound of bytes, per kind of file (its start, or its end for a log's tail);
- JSON parsed strictly (:func:`loads`): finite numbers, integers of at most 19 digits, nesting at
  most ``MAX_DEPTH`` deep; then made into a typed record by protocol/typed.py.

A file that fails is :class:`Unreadable`, whose ``str()`` is one sentence naming it
("spec.json: not a regular file (a FIFO)"); a missing file stays FileNotFoundError. Folder walks
(:func:`entries`) are bounded in count and hold one descriptor at a time.

Writes of the engine's own files (:func:`write_atomic`) go to a temporary file created with
``O_EXCL|O_NOFOLLOW`` (never through a link a rank planted, never blocking on a FIFO), renamed
over the target: a reader sees the old file or the new one, whole.
"""

from __future__ import annotations

import errno
import json
import math
import os
import stat
from pathlib import Path
from typing import Any

MAX_DEPTH = 64  # of JSON nesting: the engine's own files go 6 deep
MAX_ENTRIES = 4096  # of one folder walk: more ranks or runs than this are read up to this many
_OPEN_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_OPEN_DIR = os.O_RDONLY | os.O_NOFOLLOW | os.O_DIRECTORY | os.O_CLOEXEC


class Unreadable(OSError, ValueError):
    """A run folder's file that cannot be used; ``str()`` names it and says why, in one sentence.
    Both an OSError (it could not be read) and a ValueError (what was read is not what it claims)."""

    def __init__(self, name: str | Path, why: str) -> None:
        super().__init__(f"{name}: {why}")
        self.why = why


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISCHR, "a device"),
        (stat.S_ISBLK, "a device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a plain file"


def _shown(path: Path, root: Path | None) -> str:
    """A file named as the user knows it: below its run folder, else by its own name."""
    if root is not None and path.is_relative_to(root):
        return str(path.relative_to(root))
    return path.name or str(path)


def _parent(path: Path, root: Path | None) -> tuple[int, str]:
    """(a descriptor of the folder holding ``path``, its name there): below ``root`` every folder
    opened without following a link (Unreadable for one); without ``root`` the parent as named."""
    parts: tuple[str, ...]
    if root is not None:
        try:
            parts = path.relative_to(root).parts
        except ValueError:
            raise Unreadable(path.name, "not inside its run folder") from None
        base = str(root)
    else:
        parts, base = (path.name,), str(path.parent)
    if not parts or ".." in parts:
        raise Unreadable(_shown(path, root), "not a file of its run folder")
    fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    for part in parts[:-1]:
        try:
            inner = os.open(part, _OPEN_DIR, dir_fd=fd)
        except OSError as exc:
            os.close(fd)
            raise _named(exc, _shown(path, root), f"{part} is a link or not a folder") from None
        os.close(fd)
        fd = inner
    return fd, parts[-1]


def open_regular(path: Path, root: Path | None = None) -> int:
    """A descriptor of ``path``, a regular file, read-only. Below ``root`` (the run folder, whose own
    path is trusted: the user chose it) every component is opened without following a link;
    without ``root`` only the last one is. Unreadable for a link, a FIFO, a device or a folder;
    FileNotFoundError when there is nothing."""
    path = Path(path)
    folder, name = _parent(path, root)
    try:
        file = os.open(name, _OPEN_FILE, dir_fd=folder)
    except OSError as exc:
        raise _named(exc, _shown(path, root), "a symbolic link, not followed") from None
    finally:
        os.close(folder)
    info = os.fstat(file)
    if not stat.S_ISREG(info.st_mode):
        os.close(file)
        raise Unreadable(_shown(path, root), f"not a regular file ({_kind(info.st_mode)})")
    return file


def _named(exc: OSError, path: str, link: str) -> Exception:
    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
        return Unreadable(path, link)
    if exc.errno == errno.ENXIO:  # a socket
        return Unreadable(path, "not a regular file (a socket)")
    return exc


def read_bytes(path: Path, limit: int, *, tail: bool = False, root: Path | None = None) -> bytes:
    """At most ``limit`` bytes of a run folder's file: its start, or its end with ``tail``."""
    fd = open_regular(path, root)
    try:
        size = os.fstat(fd).st_size
        if tail and size > limit:
            os.lseek(fd, size - limit, os.SEEK_SET)
        chunks, left = [], limit
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 16))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks)


def read_text(path: Path, limit: int, *, tail: bool = False, root: Path | None = None) -> str:
    """:func:`read_bytes` as text; bytes that are not UTF-8 are replaced."""
    return read_bytes(path, limit, tail=tail, root=root).decode("utf-8", "replace")


def read_json(path: Path, limit: int, *, root: Path | None = None) -> Any:
    """A run folder's JSON file, read with :func:`read_bytes` and parsed by :func:`loads`; a file
    over ``limit`` bytes is Unreadable, not cut (cut JSON is no JSON)."""
    data = read_bytes(path, limit + 1, root=root)
    if len(data) > limit:
        raise Unreadable(_shown(Path(path), root), f"over {limit:,} bytes")
    try:
        return loads(data.decode("utf-8", "replace"))
    except ValueError as exc:
        raise Unreadable(_shown(Path(path), root), str(exc)) from None


def dumps(document: Any, **options: Any) -> str:
    """Strict JSON of the engine's own (never NaN or Infinity, which JSON has not): a number that is
    not finite (a diverged loss, say) is written as null."""
    return json.dumps(finite_only(document), allow_nan=False, **options)


def finite_only(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite_only(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_only(v) for v in value]
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON has")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text[:24]} is out of range")
    return value


def _whole(text: str) -> int:
    if len(text.lstrip("-")) > 19:
        raise ValueError(f"{text[:24]}… has more than 19 digits")
    return int(text)


def loads(text: str | bytes) -> Any:
    """JSON as the engine accepts it from a file it did not write alone: ValueError for NaN or
    Infinity, a number out of range, an integer of more than 19 digits, or nesting deeper than
    ``MAX_DEPTH``; never RecursionError."""
    try:
        value = json.loads(text, parse_constant=_no_constant, parse_float=_finite, parse_int=_whole)
    except RecursionError:
        raise ValueError(f"nested deeper than {MAX_DEPTH}") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})") from None
    _check_depth(value)
    return value


def _check_depth(value: Any) -> None:
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth > MAX_DEPTH:
                raise ValueError(f"nested deeper than {MAX_DEPTH}")
            stack.extend((v, depth + 1) for v in (item.values() if isinstance(item, dict) else item))


def entries(folder: Path, limit: int = MAX_ENTRIES) -> list[os.DirEntry]:
    """At most ``limit`` entries of a folder, in the order the file system gives them (the caller
    sorts): one descriptor, held while listing. An unreadable folder has none."""
    found: list[os.DirEntry] = []
    try:
        with os.scandir(folder) as scan:
            for entry in scan:
                found.append(entry)
                if len(found) >= limit:
                    break
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        return []
    return found


def write_atomic(path: Path, data: bytes | str, root: Path | None = None) -> None:
    """Write one of the engine's own files whole: a temporary beside it created with
    ``O_EXCL|O_NOFOLLOW`` (a link or FIFO a rank planted under that name is removed first, never
    written through), then renamed over ``path`` (rename replaces a link; it does not follow it).
    Below ``root`` no folder on the way is a link (Unreadable otherwise)."""
    payload = data.encode("utf-8") if isinstance(data, str) else data
    folder, name = _parent(Path(path), root)
    temp = f".{name}.{os.getpid()}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        try:
            fd = os.open(temp, flags, 0o644, dir_fd=folder)
        except FileExistsError:
            _remove(temp, folder)
            fd = os.open(temp, flags, 0o644, dir_fd=folder)
        try:
            view = memoryview(payload)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        try:
            os.replace(temp, name, src_dir_fd=folder, dst_dir_fd=folder)
        except OSError:
            _remove(temp, folder)
            raise
    finally:
        os.close(folder)


def _remove(name: str, folder: int) -> None:
    try:
        os.unlink(name, dir_fd=folder)
    except FileNotFoundError:
        pass


def read_capped(path: Path, limit: int, *, tail: bool = False, root: Path | None = None) -> str:
    """The text of a file of a run, at most ``limit`` bytes of it: its start, or its end with
    ``tail``; read by the one reader (protocol/folder.py: regular files only, no link followed
    below ``root``, never blocking on a FIFO). Bytes that are not UTF-8 are replaced."""
    return read_text(path, limit, tail=tail, root=root)
