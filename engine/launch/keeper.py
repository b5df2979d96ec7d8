"""The run's keeper: the first process of every run, between mgpu-tui and the launcher.

    python -m mgpu_tui.engine.launch.keeper --grace 5 --control FD -- python -m torch.distributed.run ...

Why it exists: a rank is anyone's code, and may start processes of its own that leave
its session, drop the run's environment, or outlive it. The keeper makes itself the
*child subreaper* of the run (Linux ``PR_SET_CHILD_SUBREAPER``): every orphan of the
run, however it detached, is re-parented to the keeper instead of to init, so the
keeper always knows the whole tree. It ends that tree in three cases, whatever the
launcher does on its own:

- the launcher exits: whatever is left of the run is killed;
- mgpu-tui asks, on its control pipe (``signal N GRACE``: signal N to the job's process group,
  SIGKILL to everything left GRACE seconds later; ``kill``: SIGKILL now);
- mgpu-tui dies, even by SIGKILL: the control pipe's end (and a parent-death signal) starts the
  same stop, SIGTERM then ``--grace``, with no one to ask for it.

The job's process group: every process of the tree in the keeper's own group (and the
launcher), each signalled once, as ``kill -SIG -PGID`` would, never the processes that made
groups or sessions of their own (torchrun's workers: torchrun passes the signal on itself).

``--foreground``: the keeper and the job share mgpu-tui's process group, the terminal's
foreground group, as a shell runs a command (``mgpu-tui exec``): Ctrl-C, a hangup or a
``kill`` of the whole group reach the job from the kernel, once. The keeper then never passes
on a signal that reached it from outside, and a request for a signal it has just received
itself is not sent again (the group had it). Without it (a mode's run, the app) the keeper
leads a session of its own, and a stop signal from outside (SIGTERM, SIGINT, SIGHUP) is a stop.
``--ignored``: the signals ignored when mgpu-tui started (``nohup``): the launcher starts with
them ignored, and every other signal the keeper catches at its default, as bare.

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
# Caught, and never acted on alone under --foreground: Ctrl-\ reaches the whole group, as Ctrl-C does.
CAUGHT = (*STOP_SIGNALS, signal.SIGQUIT)
# A request for a signal the keeper itself received this recently is the same signal, sent to the
# whole group (a Ctrl-C, Slurm's or timeout's signal to every process): the job has had it.
SAME_SIGNAL_S = 5.0


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


def term_when_parent_dies() -> None:
    """In the keeper, before it runs: get SIGTERM when mgpu-tui dies, even by SIGKILL.

    The keeper then stops the whole run, so a killed mgpu-tui leaves nothing behind. Linux ties
    this to the thread that started the child: runs are started from a thread that outlives them
    (the main thread, or the comparison thread, which waits for its runs).
    """
    try:
        _prctl(ctypes.CDLL(None, use_errno=True), _PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):  # not Linux: the other safeguards remain
        pass


def _catch_signals() -> int:
    """Make each caught signal write its number to a pipe, and return the pipe's read end.

    A handler that raised would do so at whatever line the keeper was on, even between a loop's
    end and the statement that ends the run, and the keeper would die with the run half ended
    (a clean-clone CI run saw a grandchild outlive its run that way). Here a signal only wakes
    the loop, which reads the pipe where it chooses to (the number is written at delivery, so a
    signal that arrived before a request on the control pipe is read before it).
    """
    read, write = os.pipe()
    os.set_blocking(read, False)
    os.set_blocking(write, False)
    for sig in CAUGHT:
        signal.signal(sig, lambda signum, frame: None)
    signal.set_wakeup_fd(write, warn_on_full_buffer=False)
    return read


class Keeper:
    """The watch over one launcher: its stop signals, mgpu-tui's requests, the grace, the end."""

    def __init__(
        self, launcher: subprocess.Popen, wake: int, control: int | None, *, grace: float, foreground: bool
    ) -> None:
        self.launcher, self.wake, self.control = launcher, wake, control
        self.grace, self.foreground = grace, foreground
        self.me = os.getpid()
        self.parent: int | None = os.getppid()  # mgpu-tui; None once it is gone
        self.deadline: float | None = None  # set by a stop: when the grace runs out
        self.seen: dict[int, float] = {}  # a signal from outside -> when (--foreground)
        self._pending = b""  # the control pipe's unfinished line

    def watch(self) -> None:
        """Until the launcher exits: requests and signals, and SIGKILL to the tree at the deadline."""
        pidfd = os.pidfd_open(self.launcher.pid)
        while self.launcher.poll() is None:
            timeout = None if self.deadline is None else max(0.0, self.deadline - time.monotonic())
            ears = [pidfd, self.wake] + ([self.control] if self.control is not None else [])
            select.select(ears, [], [], timeout)
            self._signals()  # first: a signal that reached the keeper came before any request about it
            self._requests()
            if self.parent is not None and os.getppid() != self.parent:
                self.parent = None  # mgpu-tui is gone (its parent-death signal woke us)
                self.orphaned()
            if self.deadline is not None and time.monotonic() >= self.deadline:
                kill_tree(self.me, self.launcher.pid, within=1.0)  # the loop then finds the launcher gone

    def _signals(self) -> None:
        for sig in _drain(self.wake):
            if self.foreground:
                self.seen[sig] = time.monotonic()  # the whole group had it: the job's own to handle
            elif sig in STOP_SIGNALS and self.deadline is None:
                self.stop(signal.SIGTERM, self.grace)

    def _requests(self) -> None:
        if self.control is None:
            return
        data, ended = _drain_bytes(self.control)
        self._pending += data
        *lines, self._pending = self._pending.split(b"\n")
        for line in lines:
            words = line.decode("ascii", "replace").split()
            if words[:1] == ["kill"]:
                self.deadline = time.monotonic()
            elif words[:1] == ["signal"] and len(words) == 3:
                try:
                    self.stop(signal.Signals(int(words[1])), float(words[2]))
                except ValueError:
                    continue
        if ended:  # mgpu-tui is gone, even by SIGKILL: nobody will ask for the end
            os.close(self.control)
            self.control = None
            self.orphaned()

    def orphaned(self) -> None:
        """mgpu-tui is gone (its pipe closed, or its parent-death signal): the stop it can no longer
        ask for, once (a stop under way keeps its own deadline)."""
        if self.deadline is None:
            self.stop(signal.SIGTERM, self.grace, heard=False)

    def stop(self, sig: signal.Signals, grace: float, *, heard: bool = True) -> None:
        """``sig`` to the job's group, SIGKILL ``grace`` s later. ``heard``: a signal mgpu-tui heard,
        not sent again where the group has just had it (mgpu-tui's end is the keeper's own news:
        its parent-death SIGTERM is no signal of the group's)."""
        now = time.monotonic()
        if not heard or now - self.seen.pop(sig, -SAME_SIGNAL_S) >= SAME_SIGNAL_S:
            signal_group(self.me, self.launcher.pid, sig)
        self.deadline = min(self.deadline or now + grace, now + grace)


def signal_group(me: int, launcher: int, sig: signal.Signals) -> None:
    """``sig`` to each process of the tree below ``me`` in the keeper's own process group, and to
    the launcher: once each, as ``kill -SIG -PGID`` reaches the job, never a process that left it."""
    group = os.getpgrp()
    for pid in descendants(me):
        try:
            if pid == launcher or os.getpgid(pid) == group:
                os.kill(pid, sig)
        except OSError:
            continue  # gone meanwhile


def _drain(fd: int) -> list[int]:
    """The signal numbers written to the wakeup pipe since the last call."""
    return list(_drain_bytes(fd)[0])


def _drain_bytes(fd: int) -> tuple[bytes, bool]:
    """Whatever a non-blocking pipe holds now, and whether its writer has closed it."""
    got = b""
    try:
        while True:
            chunk = os.read(fd, 4096)
            if not chunk:
                return got, True
            got += chunk
    except BlockingIOError:
        return got, False


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grace", type=float, default=5.0, help="seconds between SIGTERM and SIGKILL")
    parser.add_argument("--control", type=int, help="the read end of mgpu-tui's requests")
    parser.add_argument("--foreground", action="store_true", help="the job shares mgpu-tui's process group")
    parser.add_argument("--ignored", default="", help="signals ignored when mgpu-tui started: 1,2")
    parser.add_argument("--open-files", type=int, help="the launcher's soft limit of open files")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- the launcher's argv")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the launcher's command after --")
    ignored = {int(n) for n in args.ignored.split(",") if n.strip().isdigit()}
    libc = ctypes.CDLL(None, use_errno=True)
    if not _prctl(libc, _PR_SET_CHILD_SUBREAPER, 1):
        print(
            "mgpu-tui keeper: cannot become the run's subreaper: detached processes may escape it",
            file=sys.stderr,
        )
    if args.control is not None:
        os.set_blocking(args.control, False)
    wake = _catch_signals()

    def before_the_launcher_runs() -> None:  # in the launcher, before it runs
        _prctl(libc, _PR_SET_PDEATHSIG, signal.SIGTERM)
        for sig in CAUGHT:  # as mgpu-tui got them: ignored (nohup's SIGHUP) or at their default
            signal.signal(sig, signal.SIG_IGN if sig in ignored else signal.SIG_DFL)
        if args.open_files is not None:  # as mgpu-tui found it, before it raised its own
            resource.setrlimit(
                resource.RLIMIT_NOFILE, (args.open_files, resource.getrlimit(resource.RLIMIT_NOFILE)[1])
            )

    try:
        # Same stdin, stdout, stderr, process group, session and environment as the keeper's.
        launcher = subprocess.Popen(command, preexec_fn=before_the_launcher_runs)
    except OSError as exc:
        print(f"mgpu-tui keeper: cannot start {command[0]}: {exc}", file=sys.stderr)
        sys.exit(127)
    keeper = Keeper(launcher, wake, args.control, grace=args.grace, foreground=args.foreground)
    try:
        keeper.watch()
    finally:
        # Whatever ended the watch (the launcher's exit, or anything unforeseen), the run ends here.
        for sig in CAUGHT:
            signal.signal(sig, signal.SIG_IGN)
        kill_tree(keeper.me, launcher.pid)  # whatever the launcher left behind: orphans, grandchildren
        launcher.wait()
        reap(keeper.me, launcher.pid)
    _exit_like(launcher.returncode)


class KeeperControl:
    """mgpu-tui's end of a keeper's control pipe: its requests; closed (mgpu-tui gone), a stop."""

    def __init__(self) -> None:
        self.read, self.write = os.pipe()  # neither inherited by anything but the keeper (pass_fds)

    def argv(self) -> list[str]:
        return ["--control", str(self.read)]

    def started(self) -> None:
        """The keeper holds its end now; mgpu-tui keeps only its own."""
        os.close(self.read)

    def signal(self, sig: int, grace: float) -> None:
        """``sig`` to the job's group (unless the group has just had it), SIGKILL ``grace`` s later."""
        self._send(f"signal {int(sig)} {max(0.0, grace):.3f}\n")

    def kill(self) -> None:
        """SIGKILL to every process of the run, now."""
        self._send("kill\n")

    def close(self) -> None:
        if self.write >= 0:
            os.close(self.write)
            self.write = -1

    def _send(self, line: str) -> None:
        try:
            os.write(self.write, line.encode("ascii"))
        except OSError:  # the keeper has ended, and the run with it
            pass


if __name__ == "__main__":
    main()
