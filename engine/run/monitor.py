"""Who follows a run: the monitor's lock, so another process can tell a live run from a dead one.

The process that started a run (``mgpu-tui run``, the app, ``compare``) holds an exclusive
``flock`` on ``monitor.lock`` in the run directory for as long as it follows the run; the
kernel lets go of it when that process ends, however it ends. Another process (``mgpu-tui
open``, ``runs``) learns from the kernel, never from a file a rank could write:

- whether the run is still followed: the lock is held;
- by which process: ``/proc/locks`` names the process that took the lock.

Before that process is sent anything (``open``'s stop, after the user said yes), it must be
an mgpu-tui process the user owns, and not a process of any run: the engine marks every
process it starts with ``MGPU_RUN_ID``, and a monitor carries none. A rank that replaced the
lock file with one it locks itself would otherwise have us signal whatever it pointed at.
"""

from __future__ import annotations

import fcntl
import os
import pwd
import signal
import time
from dataclasses import dataclass
from pathlib import Path


class MonitorLock:
    """Held by the process that follows a run, from :meth:`hold` to :meth:`release` (or its end)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def hold(self) -> bool:
        """Take the lock; False when another process holds it, or the folder cannot be written."""
        try:  # opened close-on-exec: no rank inherits it, so it ends with this process
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
        except OSError:
            return False
        for _ in range(20):  # another process may be looking (is_followed) for a moment
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                time.sleep(0.01)
                continue
            except OSError:
                break
            self._fd = fd
            return True
        os.close(fd)
        return False

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


@dataclass(frozen=True)
class Monitor:
    """The live process that follows a run, as the kernel names it."""

    pid: int
    uid: int | None  # the owner of the process; None if it could not be read
    owner: str  # the owner's name, or their uid as text
    is_mgpu_tui: bool  # an mgpu-tui process, not a process of a run

    @property
    def owned(self) -> bool:
        return self.uid is not None and self.uid == os.getuid()

    def why_not_stoppable(self) -> str | None:
        """None if this process may be asked to stop the run; else one sentence why not."""
        if not self.is_mgpu_tui:
            return (
                f"the process holding this run's lock (pid {self.pid}) is not an mgpu-tui monitor, "
                "so nothing was sent to it."
            )
        if not self.owned:
            return f"this run belongs to {self.owner} (its monitor is pid {self.pid}); only they can stop it."
        return None

    def ask_to_stop(self) -> None:
        """SIGTERM to the monitor: it stops every rank and writes the summary, as on Ctrl-C."""
        reason = self.why_not_stoppable()
        if reason:
            raise PermissionError(reason)
        os.kill(self.pid, signal.SIGTERM)


def is_followed(path: Path) -> bool:
    """Whether a process follows the run now: its lock (RunDir.monitor_lock_path) is held."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return False  # no lock file: a run made before monitors took one, or not a run
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)  # (and with it the shared lock just taken, if it was)
    return False


def monitor_of(path: Path) -> Monitor | None:
    """The process holding the run's lock, from /proc/locks; None when nobody does."""
    try:
        st = os.stat(path, follow_symlinks=False)
        with open("/proc/locks", encoding="ascii", errors="replace") as f:
            table = f.read(1 << 22)
    except OSError:
        return None
    device = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    for line in table.splitlines():
        fields = line.split()
        # "1: FLOCK  ADVISORY  WRITE 27768 fe:00:2146326 0 EOF" (blocked waiters carry "->")
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[3] == "WRITE" and fields[5] == device:
            if fields[4].isdigit():
                return _describe(int(fields[4]))
    return None


def _describe(pid: int) -> Monitor:
    proc = Path(f"/proc/{pid}")
    try:
        uid: int | None = proc.stat().st_uid
    except OSError:
        uid = None
    try:
        owner = pwd.getpwuid(uid).pw_name if uid is not None else "another user"
    except KeyError:
        owner = f"uid {uid}"
    try:
        argv = (proc / "cmdline").read_bytes()[:65536].split(b"\0")
        environ = (proc / "environ").read_bytes()[: 1 << 20].split(b"\0")
    except OSError:  # gone, or not ours to read
        return Monitor(pid, uid, owner, is_mgpu_tui=False)
    names = b" ".join(argv)
    mgpu_tui = b"mgpu-tui" in names or b"mgpu_tui" in names
    in_a_run = any(entry.startswith(b"MGPU_RUN_ID=") for entry in environ)
    return Monitor(pid, uid, owner, is_mgpu_tui=mgpu_tui and not in_a_run)
