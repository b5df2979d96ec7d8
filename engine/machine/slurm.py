"""What Slurm's controller says, asked through its own commands (``scontrol``, ``squeue``).

Each question runs one command with a short timeout and answers None where Slurm does not (no
Slurm here, the controller down, a job long gone): callers then go on without the answer. The
parsing is pure (:func:`field`, :func:`parse_time`) and tested on Slurm's own output.
"""

from __future__ import annotations

import datetime as dt
import re
import shutil
import subprocess
from dataclasses import dataclass

TIMEOUT_S = 5.0
# A SIGTERM this close to the job's end is its time limit (or the early signal that the generated
# batch script asks for, 120 s before it), not a scancel.
TIME_LIMIT_WINDOW_S = 300.0


def _run(*argv: str) -> subprocess.CompletedProcess | None:
    """One Slurm command, bounded by TIMEOUT_S; None where it is not installed or did not answer."""
    if shutil.which(argv[0]) is None:
        return None
    try:
        return subprocess.run(
            argv, capture_output=True, text=True, timeout=TIMEOUT_S, stdin=subprocess.DEVNULL
        )
    except (OSError, subprocess.SubprocessError):
        return None


def _ask(*argv: str) -> str | None:
    """What a Slurm command printed, or None where it failed or did not answer."""
    done = _run(*argv)
    return done.stdout if done is not None and done.returncode == 0 else None


def field(record: str, key: str) -> str | None:
    """``key``'s value in one of scontrol's one-line records (``-o``: ``Key=value`` by spaces)."""
    match = re.search(rf"(?:^|\s){re.escape(key)}=(\S*)", record)
    return match.group(1) if match and match.group(1) not in ("", "(null)") else None


def parse_time(value: str | None) -> float | None:
    """Slurm's ``2026-11-25T21:30:00`` (the controller's local time) as a Unix time; None for
    Unknown, None or Unlimited."""
    if not value or not re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", value):
        return None
    return dt.datetime.fromisoformat(value).timestamp()


def node_address(name: str) -> str | None:
    """The address Slurm reaches node ``name`` at (its NodeAddr), or None where it does not say."""
    record = _ask("scontrol", "show", "node", "-o", name)
    return field(record, "NodeAddr") if record else None


@dataclass(frozen=True)
class JobState:
    state: str  # RUNNING, SIGNALING (while --signal's is sent), COMPLETING, CANCELLED, TIMEOUT, ...
    reason: str | None  # why it is in that state: TimeLimit, NodeFail, None, ...
    end_time: float | None  # when it ends (or ended), as the controller has it
    nodelist: str | None = None  # the hosts it runs on, as a Slurm host list (bn-host[1-2])


def job_state(job_id: str) -> JobState | None:
    """The job's state and end time from ``scontrol show job``; None where Slurm does not answer."""
    record = _ask("scontrol", "show", "job", "-o", job_id)
    if not record or not (state := field(record, "JobState")):
        return None
    return JobState(
        state, field(record, "Reason"), parse_time(field(record, "EndTime")), field(record, "NodeList")
    )


def why_ended(job: JobState | None, now: float) -> str | None:
    """Why Slurm signalled the job's processes: "cancelled" (scancel) or "time limit"; None when
    the controller's answer says neither (a signal sent by hand, say).

    While Slurm kills a job's processes the job is COMPLETING: its Reason says TimeLimit when the
    time limit ended it, and nothing when scancel did. A job still running (SIGNALING while Slurm
    sends it) signalled within TIME_LIMIT_WINDOW_S of its end got the early signal that its
    script asked for (--signal)."""
    if job is None:
        return None
    if job.state == "TIMEOUT" or job.reason == "TimeLimit":
        return "time limit"
    if job.state.startswith("CANCELLED") or (job.state == "COMPLETING" and job.reason in (None, "None")):
        return "cancelled"
    if (
        job.state in ("RUNNING", "SIGNALING")
        and job.end_time is not None
        and job.end_time - now <= TIME_LIMIT_WINDOW_S
    ):
        return "time limit"
    return None


def cancel_job(job_id: str) -> str | None:
    """``scancel JOB``: None once Slurm took it, else one sentence with scancel's own words."""
    if not job_id.isdigit():
        return f"{job_id[:40]!r} is not a Slurm job id."
    if shutil.which("scancel") is None:
        return "scancel is not installed here: cancel the job from a host of the cluster."
    done = _run("scancel", job_id)
    if done is None:
        return f"scancel {job_id} did not answer within {TIMEOUT_S:.0f} s."
    if done.returncode:
        return f"scancel {job_id} refused: {done.stderr.strip()[:300] or done.returncode}."
    return None


def queue_states(job_ids: list[str]) -> dict[str, str]:
    """Each job's state as squeue still knows it (RUNNING, PENDING, ...); {} where it does not answer."""
    wanted = [j for j in job_ids if j.isdigit()]
    if not wanted:
        return {}
    out = _ask("squeue", "-h", "-o", "%i %T", "-j", ",".join(wanted))
    states: dict[str, str] = {}
    for line in (out or "").splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] in wanted:
            states[parts[0]] = parts[1]
    return states
