"""Lower the CPU priority of a run's processes, so a screen on the same machine keeps answering.

Two knobs, because Linux has two. ``nice`` weighs threads against each other, and
children inherit it, so the launcher is started niced and every rank with it. But
where the kernel groups processes by session (``sched_autogroup``, on by default on
many distributions), threads of different sessions compete as whole groups and their
nice values do not count against each other. torchrun starts each rank in a session
of its own, so each rank's group needs the value too: ``/proc/<pid>/autogroup``.

Measured on a 2-core machine with 4 CPU ranks: the app's main thread waited for a CPU
46% of the time with the ranks' threads at nice 10 and 12% once their groups were too.

Raising a nice value needs no privilege; where a process is gone, or the kernel has no
autogroup, there is nothing to lower and these do nothing.
"""

from __future__ import annotations

import os

# What the app asks for the runs it starts: enough for its frames to come first, and
# nothing taken from a run while the app does not need the CPU.
UI_RANK_NICE = 10


def nice_self(nice: int) -> None:
    """In a child before it runs its program: the launcher, and so every rank, at ``nice``."""
    if nice:
        os.nice(nice)


def lower_group(pid: int, nice: int) -> None:
    """Give the scheduling group of ``pid``'s session the same ``nice`` (no-op without autogroup)."""
    if not nice:
        return
    try:
        with open(f"/proc/{pid}/autogroup", "w") as group:
            group.write(str(nice))
    except OSError:  # gone, not Linux, or no autogroup: the inherited nice value still holds
        pass
