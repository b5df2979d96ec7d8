"""The run's keeper: the first process of every run, between mgpu-tui and the launcher.

    python -m mgpu_tui.engine.launch.keeper --grace 5 -- python -m torch.distributed.run ...

Why it exists: a rank is anyone's code, and may start processes of its own that leave
its session, drop the run's environment, or outlive it. The keeper makes itself the
*child subreaper* of the run (Linux ``PR_SET_CHILD_SUBREAPER``): every orphan of the
run, however it detached, is re-parented to the keeper instead of to init, so the
keeper always knows the whole tree. It ends that tree in three cases, whatever the
launcher does on its own:

- the launcher exits: whatever is left of the run is killed;
- the keeper is told to stop (SIGTERM, SIGINT, SIGHUP, from mgpu-tui): SIGTERM to the
  launcher, ``--grace`` seconds, then SIGKILL to everything left;
- mgpu-tui dies, even by SIGKILL: the engine set a parent-death signal (SIGTERM) on the
  keeper, so the same stop follows with no one to ask for it.

Then the keeper exits the way the launcher did (its exit code, or the same signal), so
to mgpu-tui it looks like the launcher itself. Standard library only, Linux only: it
must start fast and import nothing of a rank's.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import resource
import select
import signal
import subprocess
import sys
import time

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def _processes() -> dict[int, tuple[int, bool]]:
    """Every process now: pid -> (its parent, whether it is a zombie), read from /proc."""
    table: dict[int, tuple[int, bool]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
            # "pid (comm) state ppid ...": comm may hold spaces and parentheses; the last ")" ends it.
            fields = stat[stat.rfind(b")") + 2 :].split()
            table[int(entry)] = (int(fields[1]), fields[0] == b"Z")
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile (a half-read entry is skipped, never fatal)
    return table


def _children(table: dict[int, tuple[int, bool]]) -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in table.items():
        children.setdefault(parent, []).append(pid)
    return children


def descendants(root: int) -> list[int]:
    """Every live process below ``root`` (children before their own children; zombies left out:
    they are over, and only their parent's wait removes them)."""
    table = _processes()
    children = _children(table)
    found, queue = [], [root]
    while queue:
        for child in children.get(queue.pop(0), []):
            queue.append(child)
            if not table[child][1]:
                found.append(child)
    return found


def kill_tree(root: int, launcher: int, *, within: float = 5.0) -> None:
    """SIGKILL every process below ``root`` until none is left (new ones may appear meanwhile).

    A scan of /proc is not atomic: a process re-parented while it is read can be missed once, so
    the tree counts as empty only when two scans in a row find nothing alive.
    """
    deadline = time.monotonic() + within
    empty_scans = 0
    while empty_scans < 2 and time.monotonic() < deadline:
        alive = descendants(root)
        empty_scans = 0 if alive else empty_scans + 1
        for pid in alive:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.02)
        reap(root, launcher)


def reap(me: int, launcher: int) -> None:
    """Collect the orphans re-parented here that have ended (their zombies leave the table).

    Not the launcher: its exit status is the run's, and Popen must read it itself.
    """
    for pid in _children(_processes()).get(me, []):
        if pid != launcher:
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass


def _exit_like(returncode: int) -> None:
    """Exit as the launcher did: with its code, or killed by the same signal."""
    if returncode >= 0:
        sys.exit(returncode)
    sig = -returncode
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # the launcher's crash, not ours, is the story
    if sig not in (signal.SIGKILL, signal.SIGSTOP):  # their handlers cannot be changed
        signal.signal(sig, signal.SIG_DFL)
    os.kill(os.getpid(), sig)
    sys.exit(128 + sig)  # a signal that does not end a process by default


def _prctl(libc: ctypes.CDLL, option: int, value: int) -> bool:
    """prctl(option, value): each argument a full unsigned long, as the kernel reads them."""
    args = (ctypes.c_ulong(value), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0))
    return libc.prctl(ctypes.c_int(option), *args) == 0


def _stop_signals() -> int:
    """Make each stop signal write a byte to a pipe, and return its read end.

    A handler that raised would do so at whatever line the keeper was on, even between a loop's
    end and the statement that ends the run, and the keeper would die with the run half ended
    (a clean-clone CI run saw a grandchild outlive its run that way). Here a signal only wakes
    the loop, which reads the pipe where it chooses to.
    """
    read, write = os.pipe()
    os.set_blocking(read, False)
    os.set_blocking(write, False)
    for sig in STOP_SIGNALS:
        signal.signal(sig, lambda signum, frame: None)
    signal.set_wakeup_fd(write, warn_on_full_buffer=False)
    return read


def _stop_asked(wake: int) -> bool:
    """Whether a stop signal arrived since the last call (the pipe drained)."""
    asked = False
    try:
        while os.read(wake, 64):
            asked = True
    except BlockingIOError:
        pass
    return asked


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grace", type=float, default=5.0, help="seconds between SIGTERM and SIGKILL")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- the launcher's argv")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the launcher's command after --")
    libc = ctypes.CDLL(None, use_errno=True)
    if not _prctl(libc, _PR_SET_CHILD_SUBREAPER, 1):
        print(
            "mgpu-tui keeper: cannot become the run's subreaper: detached processes may escape it",
            file=sys.stderr,
        )
    me = os.getpid()
    wake = _stop_signals()

    def term_when_keeper_dies() -> None:  # in the launcher, before it runs
        _prctl(libc, _PR_SET_PDEATHSIG, signal.SIGTERM)

    try:
        # Same stdin, stdout, stderr, session and environment as the keeper's.
        launcher = subprocess.Popen(command, preexec_fn=term_when_keeper_dies)
    except OSError as exc:
        print(f"mgpu-tui keeper: cannot start {command[0]}: {exc}", file=sys.stderr)
        sys.exit(127)
    try:
        _watch(launcher, wake, args.grace, me)
    finally:
        # Whatever ended the watch (the launcher's exit, or anything unforeseen), the run ends here.
        for sig in STOP_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)
        kill_tree(me, launcher.pid)  # whatever the launcher left behind: orphans, grandchildren
        launcher.wait()
        reap(me, launcher.pid)
    _exit_like(launcher.returncode)


def _watch(launcher: subprocess.Popen, wake: int, grace: float, me: int) -> None:
    """Until the launcher exits: a stop passes SIGTERM to it, and ``grace`` seconds later every
    process of the run is killed (the launcher and the ranks that ignored SIGTERM)."""
    pidfd = os.pidfd_open(launcher.pid)
    deadline = None  # set by a stop: when the grace runs out
    while launcher.poll() is None:
        timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
        select.select([pidfd, wake], [], [], timeout)
        if _stop_asked(wake) and deadline is None:
            deadline = time.monotonic() + grace
            try:
                launcher.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass
        if deadline is not None and time.monotonic() >= deadline:
            kill_tree(me, launcher.pid, within=1.0)  # the loop's poll then finds the launcher gone


if __name__ == "__main__":
    main()
