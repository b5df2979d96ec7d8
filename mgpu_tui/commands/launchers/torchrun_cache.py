"""What torchrun's own parser said of a line, kept: the same line, under the same torch, Python and
torchrun environment, is not parsed again.

Reading a line with torchrun's parser imports torch in a child process (engine/rank/torchrun_args.py),
a second import of torch before the job's own torchrun makes the first: about 2 s of the drop-in's
start on an idle machine (bench/run.py job-costs). A user runs the same line again and again (a CI
job, an experiment's loop), so its answer is kept under ``$XDG_CACHE_HOME/mgpu-tui/torchrun-lines``
(``~/.cache`` without it; ``$MGPU_CACHE_DIR/torchrun-lines`` where set), one small file a line,
keyed by everything the answer depends on: the line, mgpu-tui's own options, the interpreter, the
files of torch's parser and of the reader (path, size, change time: a torch upgraded, a file edited,
is a new key), and every ``PET_*`` and ``TORCH_ELASTIC_*`` variable (the parser's defaults come from
them). Only an answer is kept, never an error or ``--help``. A cache that cannot be read or written
is no cache: the line is parsed. ``MGPU_TORCHRUN_CACHE=0`` turns it off. The folder is the user's
own, as pip's cache is: a job can write there as it can edit its own script.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from mgpu_tui.engine.protocol.folder import read_capped

OFF = "MGPU_TORCHRUN_CACHE"  # "0": every line parsed by torchrun's parser
MAX_ENTRIES = 64  # lines kept; the least recently used go first
MAX_ANSWER_BYTES = 1 << 20


def folder() -> Path:
    """``$MGPU_CACHE_DIR/torchrun-lines``, else under ``$XDG_CACHE_HOME/mgpu-tui`` (``~/.cache``)."""
    own = os.environ.get("MGPU_CACHE_DIR")
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(own or os.path.join(base, "mgpu-tui")) / "torchrun-lines"


def _identity(path: str | None) -> list[Any]:
    try:
        info = os.stat(path) if path else None
    except OSError:
        info = None
    return [path, info.st_size, info.st_mtime_ns, info.st_ctime_ns] if info else [path]


def _sources() -> list[str | None]:
    """The files whose code makes the answer, found without importing torch (find_spec of a top-level
    package reads no code of it)."""
    spec = importlib.util.find_spec("torch")
    torch_dir = Path(spec.origin).parent if spec is not None and spec.origin else None
    reader = importlib.util.find_spec("mgpu_tui.engine.rank.torchrun_args")
    return [
        str(torch_dir / "version.py") if torch_dir else None,
        str(torch_dir / "distributed" / "run.py") if torch_dir else None,
        str(torch_dir / "distributed" / "argparse_util.py") if torch_dir else None,
        reader.origin if reader is not None else None,
    ]


def key(python: str, ours: Any, argv: list[str], environ: dict[str, str]) -> str | None:
    """The line's key, or None where torch cannot be found (then nothing is kept: the parse says why)."""
    sources = _sources()
    if sources[1] is None:
        return None
    said = {name: value for name, value in environ.items() if name.startswith(("PET_", "TORCH_ELASTIC_"))}
    material = [python, ours, argv, sorted(said.items()), [_identity(path) for path in sources]]
    return hashlib.sha256(json.dumps(material).encode()).hexdigest()


def recall(line_key: str | None) -> Any | None:
    """The answer kept for the key (its file touched: recently used), or None."""
    if line_key is None or os.environ.get(OFF) == "0":
        return None
    path = folder() / f"{line_key}.json"
    try:
        answer = json.loads(read_capped(path, MAX_ANSWER_BYTES, root=folder()))
        os.utime(path)
    except (OSError, ValueError):
        return None
    return answer if isinstance(answer, dict) and "torchrun" in answer else None


def keep(line_key: str | None, answer: Any) -> None:
    """The answer kept under its key (written whole, then renamed); the oldest past MAX_ENTRIES go."""
    if line_key is None or os.environ.get(OFF) == "0":
        return
    where = folder()
    with contextlib.suppress(OSError):
        where.mkdir(parents=True, exist_ok=True)
        fd, temporary = tempfile.mkstemp(dir=where, prefix=".", suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(answer, f)
            os.replace(temporary, where / f"{line_key}.json")
        except BaseException:
            os.unlink(temporary)
            raise
        kept = sorted(where.glob("*.json"), key=lambda p: p.stat().st_mtime_ns)
        for old in kept[:-MAX_ENTRIES]:
            old.unlink()
