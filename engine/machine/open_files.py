"""How many files this process may hold open: following a job keeps each rank's event file open,
and a job of 1,024 ranks would meet the soft limit of 1,024 that many systems set. Standard library
only: the CLI calls it before anything else, and --help must stay quick."""

from __future__ import annotations

MAX_OPEN_FILES = 65536
_FOUND: list[int] = []  # the soft limit this process started with, before it was raised


def found_open_files_limit() -> int | None:
    """The soft limit of open files this process started with (a job run as bare gets it back:
    launch/keeper.py), once raise_open_files_limit ran; None before, or where it was unlimited."""
    return _FOUND[0] if _FOUND else None


def raise_open_files_limit() -> int | None:
    """The soft limit of open files raised to the hard one (at most MAX_OPEN_FILES): following a job
    keeps each rank's event file open, and a job of 1,024 ranks would meet the soft limit of 1,024
    that many systems set. The new soft limit; None where it could not be read or changed."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if not _FOUND and soft != resource.RLIM_INFINITY:
            _FOUND.append(soft)
        want = MAX_OPEN_FILES if hard == resource.RLIM_INFINITY else min(hard, MAX_OPEN_FILES)
        if soft != resource.RLIM_INFINITY and soft < want:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
            return want
        return soft
    except (ImportError, OSError, ValueError):
        return None
