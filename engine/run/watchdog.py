"""The stall watch: a rank that reported before and has been silent too long stalls the run.

The rule lives here and only here (the engine and the app's rank table both ask
:func:`stall_timeout`): a rank is stalled when its last event is older than
``--stall-timeout``, or by default max(30 s, 10 x the job's recent median step time).
Ranks that have not said hello are starting, not stalled; ranks that said done are not
watched. When ranks stall, every rank is asked for its Python stacks (SIGUSR2; the
reporter writes them to ``stacks/rank<N>.txt``) and the stall is described as a root
cause that carries them, since steps alone cannot tell the rank that hung from the
ranks waiting for it in a collective.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from mgpu_tui.engine.run.rootcause import RootCause

DEFAULT_MIN_S = 30.0
STEPS_OF_SILENCE = 10  # the default timeout: this many recent median step times, at least DEFAULT_MIN_S
STACKS_WAIT_S = 3.0  # how long ranks get to write their stacks after the request


def stall_timeout(requested: float | None, recent_step_time: float | None) -> float:
    """Seconds of silence after which a rank is stalled (the one place this rule is written)."""
    if requested:
        return requested
    return max(DEFAULT_MIN_S, STEPS_OF_SILENCE * (recent_step_time or 0.0))


@dataclass(frozen=True)
class StalledRank:
    rank: int
    last_step: int
    silent_s: float


@dataclass(frozen=True)
class Stall:
    timeout_s: float
    ranks: tuple[StalledRank, ...]
    stacks_dir: str

    def to_json(self) -> dict:
        return {"timeout_s": self.timeout_s, "ranks": [asdict(r) for r in self.ranks],
                "stacks_dir": self.stacks_dir}  # fmt: skip

    @classmethod
    def from_json(cls, document: dict) -> Stall:
        return cls(document["timeout_s"], tuple(StalledRank(**r) for r in document["ranks"]),
                   document["stacks_dir"])  # fmt: skip

    def root_cause(self) -> RootCause:
        """The stall as a root cause, with every stuck rank's stacks."""
        stuck = sorted(self.ranks, key=lambda r: (r.last_step, r.rank))
        where = ", ".join(f"rank {r.rank} at step {r.last_step}" for r in stuck)
        parts = []
        for r in stuck:
            try:
                text = (Path(self.stacks_dir) / f"rank{r.rank}.txt").read_text(errors="replace").strip()
            except OSError:
                text = ""
            parts.append(f"--- rank {r.rank} ---\n{text or '(no stacks: the rank has no reporter)'}")
        message = f"stalled: no progress for {self.timeout_s:.0f} s ({where})"
        return RootCause(stuck[0].rank, None, None, message, "\n".join(parts))


# (rank, time of its last event, its last step, done) for every rank heard from.
Liveness = list[tuple[int, float | None, int, bool]]


def find_stalled(liveness: Liveness, timeout: float, now: float) -> tuple[StalledRank, ...]:
    return tuple(StalledRank(rank, last_step, round(now - last_t, 1))
                 for rank, last_t, last_step, done in liveness
                 if not done and last_t is not None and now - last_t > timeout)  # fmt: skip


def request_stacks(stalled: tuple[StalledRank, ...], stacks_dir: Path,
                   signal_ranks: Callable[[], object]) -> None:  # fmt: skip
    """Ask every rank for its stacks, then wait (a few seconds at most) for the stalled ranks' files."""
    signal_ranks()
    deadline = time.monotonic() + STACKS_WAIT_S
    while time.monotonic() < deadline and not all(
        (stacks_dir / f"rank{r.rank}.txt").exists() and (stacks_dir / f"rank{r.rank}.txt").stat().st_size
        for r in stalled
    ):
        time.sleep(0.1)
