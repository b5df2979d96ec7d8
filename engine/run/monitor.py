"""Who follows a run: the monitor's lock, so another process can tell a live run from a dead one.

The process that started a run (``mgpu-tui run``, the app, ``compare``) holds an exclusive
``flock`` on ``monitor.lock`` in the run directory for as long as it follows the run; the
kernel lets go of it when that process ends, however it ends. Another process (``mgpu-tui
open``, ``runs``) learns from the kernel, never from a file a rank could write alone:

- whether the run is still followed: the lock is held;
- by which process: ``/proc/locks`` names the process that took the lock.

Before that process is sent anything (``open``'s stop, after the user said yes to a question
naming its pid), every one of these must hold, or nothing is sent and one sentence says why:

- the monitor recorded itself when it took the lock (``monitor.json`` beside the lock: its pid,
  its start time from ``/proc``, the machine's boot id and host name), and names this process,
  started at that very time, on this machine: a run of another host (a Slurm job seen from the
  login node) is never signalled by pid;
- the process holds this run's lock file open (``/proc/PID/fd``): a rank that hard-linked its
  ``monitor.lock`` to another run's lock, and rewrote ``monitor.json`` to match, names that
  run's monitor, which holds *its own* folder's lock, not this one;
- it is an mgpu-tui process of this user, and not a process of any run (the engine marks every
  process it starts with ``MGPU_RUN_ID``; a monitor carries none);
- the signal goes through a pidfd opened, then checked against the recorded start time once
  more, so a pid reused in between is never the one signalled.
"""

from __future__ import annotations

import fcntl
import os
import pwd
import re
import signal
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from mgpu_tui.engine.launch.processes import create_time
from mgpu_tui.engine.protocol.folder import dumps, entries, read_json, write_atomic
from mgpu_tui.engine.protocol.rundir import monitor_record_path

MAX_RECORD_BYTES = 4096
MAX_FDS_LOOKED_AT = 4096
SLURM_JOB = re.compile(r"\d{1,20}")  # of the holder's open files: a monitor holds a few dozen


def slurm_job_of(environ: Mapping[str, str]) -> str | None:
    """The Slurm job an environment is of (SLURM_JOB_ID, a number), or None."""
    job = environ.get("SLURM_JOB_ID") or environ.get("SLURM_JOBID") or ""
    return job if SLURM_JOB.fullmatch(job) else None


def boot_id() -> str:
    """This boot of this machine: a pid means something only here, and only until a reboot."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            return f.read(64).strip()
    except OSError:
        return ""


@dataclass(frozen=True)
class MonitorRecord:
    """What the monitor wrote of itself when it took the lock (``monitor.json``)."""

    pid: int
    start: float  # launch/processes.py's create_time: the same figure for the same process, always
    boot_id: str
    host: str
    slurm_job: str | None = None  # the Slurm job the monitor runs in (its own SLURM_JOB_ID)

    @classmethod
    def of_this_process(cls) -> MonitorRecord:
        pid = os.getpid()
        return cls(pid, create_time(pid) or 0.0, boot_id(), socket.gethostname(), slurm_job_of(os.environ))

    @classmethod
    def read(cls, lock: Path) -> MonitorRecord | None:
        """The record beside the lock, read as untrusted (bounded, typed); None if absent or wrong."""
        try:
            document = read_json(monitor_record_path(lock), MAX_RECORD_BYTES, root=lock.parent)
            pid, start = document["pid"], document["start"]
            boot, host = document["boot_id"], document["host"]
        except (OSError, ValueError, KeyError, TypeError):
            return None
        if type(pid) is not int or type(start) not in (int, float) or not isinstance(boot, str):
            return None
        if not isinstance(host, str) or not (0 < pid < 1 << 32 and 0 <= start < 1 << 62):
            return None  # (read_json admits finite numbers only)
        job = document.get("slurm_job")
        job = job if isinstance(job, str) and SLURM_JOB.fullmatch(job) else None
        return cls(pid, float(start), boot[:64], host[:255], job)

    def write(self, lock: Path) -> None:
        document = {
            "pid": self.pid,
            "start": self.start,
            "boot_id": self.boot_id,
            "host": self.host,
            "slurm_job": self.slurm_job,
        }
        write_atomic(monitor_record_path(lock), dumps(document), root=lock.parent)


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
            try:  # who holds it, in its own words: what a stop is checked against
                MonitorRecord.of_this_process().write(self.path)
            except OSError:
                pass  # the run goes on; another process will only refuse to stop it
            return True
        os.close(fd)
        return False

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


@dataclass(frozen=True)
class Monitor:
    """The live process that follows a run, as the kernel names it, and what it recorded of itself."""

    pid: int
    uid: int | None  # the owner of the process; None if it could not be read
    owner: str  # the owner's name, or their uid as text
    is_mgpu_tui: bool  # an mgpu-tui process, not a process of a run
    start: float | None = None  # its start time (create_time), read from the kernel
    record: MonitorRecord | None = None  # what the run's monitor wrote of itself
    holds_this_lock: bool = False  # it has this run's lock file open, not a link's other name
    slurm_job: str | None = None  # the Slurm job of its environment (/proc/PID/environ)

    @property
    def owned(self) -> bool:
        return self.uid is not None and self.uid == os.getuid()

    def why_not_stoppable(self) -> str | None:
        """None if this process may be asked to stop the run; else one sentence why not."""
        record = self.record
        if record is not None and (record.boot_id, record.host) != (boot_id(), socket.gethostname()):
            return (
                f"this run's monitor runs on {record.host}, not on this machine; stop it there "
                "(a process of another machine is never signalled by its pid)."
            )
        if record is None:
            return (
                "this run's monitor left no record of itself (monitor.json), so nothing was sent "
                f"to the process holding its lock (pid {self.pid})."
            )
        if (record.pid, record.start) != (self.pid, self.start):
            return (
                f"the process holding this run's lock (pid {self.pid}) is not the monitor the run "
                "recorded, so nothing was sent to it."
            )
        if not self.holds_this_lock:
            return (
                f"the process holding this run's lock (pid {self.pid}) follows another run (the lock "
                "file is a second name of that run's), so nothing was sent to it."
            )
        if not self.is_mgpu_tui:
            return (
                f"the process holding this run's lock (pid {self.pid}) is not an mgpu-tui monitor, "
                "so nothing was sent to it."
            )
        if not self.owned:
            return f"this run belongs to {self.owner} (its monitor is pid {self.pid}); only they can stop it."
        return None

    def same_process(self, other: Monitor) -> bool:
        """The same process as ``other`` (a pid alone may have been reused since)."""
        return (self.pid, self.start) == (other.pid, other.start) and self.start is not None

    def ask_to_stop(self) -> None:
        """SIGTERM to the monitor: it stops every rank and writes the summary, as on Ctrl-C. Sent
        through a pidfd checked against the recorded start time after it was opened."""
        reason = self.why_not_stoppable()
        if reason:
            raise PermissionError(reason)
        fd = os.pidfd_open(self.pid)
        try:
            if create_time(self.pid) != self.start:  # the pidfd pins a process: is it still ours?
                raise ProcessLookupError(f"the run's monitor (pid {self.pid}) has ended.")
            signal.pidfd_send_signal(fd, signal.SIGTERM)
        finally:
            os.close(fd)


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
                return _describe(int(fields[4]), path, st)
    return None


def _holds_open(pid: int, path: Path, st: os.stat_result) -> bool:
    """Whether ``pid`` has ``path`` itself open: the same file, opened under this name (a hard link
    is the same file under another name, which /proc/PID/fd shows)."""
    try:
        wanted = os.path.realpath(path)
    except OSError:
        return False
    for entry in entries(Path(f"/proc/{pid}/fd"), MAX_FDS_LOOKED_AT):
        try:
            if os.readlink(entry.path) != wanted:
                continue
            held = os.stat(entry.path)  # the open file itself, through /proc
        except OSError:
            continue
        if (held.st_dev, held.st_ino) == (st.st_dev, st.st_ino):
            return True
    return False


def _describe(pid: int, path: Path, st: os.stat_result) -> Monitor:
    proc = Path(f"/proc/{pid}")
    try:
        uid: int | None = proc.stat().st_uid
    except OSError:
        uid = None
    try:
        owner = pwd.getpwuid(uid).pw_name if uid is not None else "another user"
    except KeyError:
        owner = f"uid {uid}"
    start, record = create_time(pid), MonitorRecord.read(path)
    try:
        argv = (proc / "cmdline").read_bytes()[:65536].split(b"\0")
        environ = (proc / "environ").read_bytes()[: 1 << 20].split(b"\0")
    except OSError:  # gone, or not ours to read
        return Monitor(pid, uid, owner, False, start, record)
    names = b" ".join(argv)
    mgpu_tui = b"mgpu-tui" in names or b"mgpu_tui" in names
    variables = dict(e.decode("utf-8", "replace").partition("=")[::2] for e in environ if b"=" in e)
    in_a_run = "MGPU_RUN_ID" in variables
    return Monitor(
        pid,
        uid,
        owner,
        mgpu_tui and not in_a_run,
        start,
        record,
        _holds_open(pid, path, st),
        slurm_job_of(variables),
    )
