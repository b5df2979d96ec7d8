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


class _Stop(Exception):
    """A stop signal arrived."""


def _children_by_parent() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue  # gone meanwhile
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses; the last ")" ends it.
        fields = stat[stat.rfind(b")") + 2 :].split()
        children.setdefault(int(fields[1]), []).append(int(entry))
    return children


def descendants(root: int) -> list[int]:
    """Every process below ``root``, read from /proc (children before their own children)."""
    children = _children_by_parent()
    found, queue = [], [root]
    while queue:
        for child in children.get(queue.pop(0), []):
            found.append(child)
            queue.append(child)
    return found


def kill_tree(root: int, launcher: int) -> None:
    """SIGKILL every process below ``root``, until none is left (new ones may appear meanwhile)."""
    for _ in range(50):
        alive = descendants(root)
        if not alive:
            return
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
    for pid in _children_by_parent().get(me, []):
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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grace", type=float, default=5.0, help="seconds between SIGTERM and SIGKILL")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- the launcher's argv")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the launcher's command after --")
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    me = os.getpid()

    def stop(signum, frame) -> None:
        raise _Stop

    for sig in STOP_SIGNALS:
        signal.signal(sig, stop)

    def term_when_keeper_dies() -> None:  # in the launcher, before it runs
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)

    try:
        # Same stdin, stdout, stderr, session and environment as the keeper's.
        launcher = subprocess.Popen(command, preexec_fn=term_when_keeper_dies)
    except _Stop:
        kill_tree(me, 0)
        sys.exit(130)
    except OSError as exc:
        print(f"mgpu-tui keeper: cannot start {command[0]}: {exc}", file=sys.stderr)
        sys.exit(127)
    pidfd = os.pidfd_open(launcher.pid)
    deadline = None  # set by a stop: when the grace runs out
    while True:
        try:
            if launcher.poll() is not None:
                break
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            select.select([pidfd], [], [], timeout)
            if deadline is not None and time.monotonic() >= deadline:
                kill_tree(me, launcher.pid)  # the launcher and the ranks that ignored SIGTERM
        except _Stop:
            if deadline is None:
                deadline = time.monotonic() + args.grace
                try:
                    launcher.send_signal(signal.SIGTERM)
                except ProcessLookupError:
                    pass
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)  # the end is under way: nothing may interrupt it
    kill_tree(me, launcher.pid)  # whatever the launcher left behind: orphans, grandchildren
    reap(me, launcher.pid)
    _exit_like(launcher.returncode)


if __name__ == "__main__":
    main()
