"""Who trained in a command run by ``mgpu-tui exec``, beside its ranks: its **trainers** and its
**phases**.

A process that trains with no process group (Hogwild's processes on a shared model, a pool's
workers in a sweep, a learning-rate finder before the real job) is a trainer of its own
(engine/rank/watch/process_watch.py): it writes ``events/trainer<PID>.jsonl``, never a rank's
file. Each hello in that file begins a training of its own (a pool worker's next task), and each
training is a trainer here, with its own figures (those of a job of one: its own
:class:`Aggregator`) and its own end.

- **Numbers**: the trainers are numbered 1, 2, ... in the order they began (their hellos).
- **A job of one process**: where no process joined a group and one training is all there is, it is
  the job itself (rank 0 of 1), as a one-process script has always been; a second training, or a
  group's ranks, make it a trainer among others (ingest.py says which the figures are).
- **Phases**: the command's trainings one after another. Each trainer spans its hello to its
  last step; the group's ranks, together, their first hello to their last event. Spans that overlap
  are one phase (Hogwild's trainers, a pool's tasks that run at once); a span that begins after
  every earlier one ended begins the next phase (a learning-rate finder, then the job).

The files are the processes' own (untrusted): a training's events fit only as rank 0 of a world
of one, under its file's pid; the files read and the trainings kept are bounded.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from mgpu_tui.engine.protocol.events import Error, Event, Hello, Step
from mgpu_tui.engine.run.figures.aggregate import Aggregator
from mgpu_tui.engine.run.figures.rank_stats import RankStats

MAX_TRAININGS = 1024  # trainings kept of one run (a sweep of more is not followed past them)


@dataclass(frozen=True)
class TrainerStats:
    """One trainer's figures: those of rank 0 of a job of its own."""

    trainer: int  # its number: 1, 2, ... in the order the trainings began
    pid: int  # its process (believed where the run's process tree recorded it: the summary checks)
    process: str | None  # its process's name as multiprocessing gives it ("Process-1", "ForkPoolWorker-2")
    began_at: float  # its hello (Unix time)
    last_step_at: float | None
    figures: RankStats
    phase: int = 0  # the phase it trained in (1, 2, ...; phases_of)


@dataclass(frozen=True)
class Phase:
    """One phase of a command: a span in which one set of trainers trained."""

    phase: int  # 1, 2, ... in order
    kind: str  # "ranks" (a process group's) or "trainers" (processes with no group)
    world_size: int  # the group's ranks (0 for a phase of trainers alone)
    trainers: tuple[int, ...]  # the trainers that trained in it
    began_at: float  # Unix time: its first hello
    ended_at: float  # its last step (the ranks': their last event)


class _Training:
    def __init__(self, pid: int, hello: Hello) -> None:
        self.pid, self.hello = pid, hello
        self.aggregator = Aggregator()
        self.last_step_at: float | None = None


class Trainers:
    """Every trainer's events, as read from its file: feed them with :meth:`add`."""

    def __init__(self) -> None:
        self._trainings: list[_Training] = []
        self._latest: dict[int, _Training] = {}  # pid -> its training under way

    def add(self, pid: int, event: Event) -> bool:
        """Take one event of ``pid``'s file; False where it does not fit (counted as malformed)."""
        if event.rank != 0:
            return False
        if isinstance(event, Hello):
            if event.pid != pid or event.world_size != 1 or len(self._trainings) >= MAX_TRAININGS:
                return False
            self._latest[pid] = _Training(pid, event)
            self._trainings.append(self._latest[pid])
        training = self._latest.get(pid)
        if training is None:  # nothing before its hello
            return False
        training.aggregator.add(event)
        if isinstance(event, Step):
            training.last_step_at = event.t
        return True

    def __len__(self) -> int:
        return len(self._trainings)

    def lone(self) -> Aggregator | None:
        """The one training's figures, where there is exactly one (a job of one process)."""
        return self._trainings[0].aggregator if len(self._trainings) == 1 else None

    def errors(self) -> dict[int, Error]:
        """Trainer number -> the ``error`` it wrote, for the trainings that did."""
        found = {}
        for number, training in enumerate(self._ordered(), start=1):
            if (error := training.aggregator.errors().get(0)) is not None:
                found[number] = error
        return found

    def _ordered(self) -> list[_Training]:
        return sorted(self._trainings, key=lambda t: (t.hello.t, t.pid))

    def figures(self, *, fresh: bool = True) -> tuple[TrainerStats, ...]:
        """Each trainer's figures, in the order the trainings began."""
        found = []
        for number, training in enumerate(self._ordered(), start=1):
            (figures,) = training.aggregator.stats(fresh=fresh).ranks or (None,)
            if figures is None:
                continue
            process = training.hello.config.get("process")
            found.append(
                TrainerStats(
                    trainer=number,
                    pid=training.pid,
                    process=process[:80] if isinstance(process, str) else None,
                    began_at=training.hello.t,
                    last_step_at=training.last_step_at,
                    figures=figures,
                )
            )
        return tuple(found)


def phases_of(
    trainers: tuple[TrainerStats, ...], ranks: tuple[float, float] | None, world_size: int | None
) -> tuple[tuple[Phase, ...], tuple[TrainerStats, ...]]:
    """The command's phases, from its trainers' spans and its ranks' (``ranks``: their first hello
    and last event; ``world_size``: their group's), and each trainer with its phase."""
    spans: list[tuple[float, float, int | None]] = [
        (t.began_at, max(t.began_at, t.last_step_at or t.began_at), t.trainer) for t in trainers
    ]
    if ranks is not None:
        spans.append((ranks[0], max(ranks), None))
    spans.sort(key=lambda s: (s[0], s[1]))
    groups: list[list[tuple[float, float, int | None]]] = []
    for span in spans:
        if groups and span[0] <= max(end for _, end, _ in groups[-1]):
            groups[-1].append(span)
        else:
            groups.append([span])
    phases, phase_of = [], {}
    for number, group in enumerate(groups, start=1):
        members = tuple(sorted(trainer for _, _, trainer in group if trainer is not None))
        has_ranks = any(trainer is None for _, _, trainer in group)
        phases.append(
            Phase(
                phase=number,
                kind="ranks" if has_ranks else "trainers",
                world_size=(world_size or 0) if has_ranks else 0,
                trainers=members,
                began_at=min(began for began, _, _ in group),
                ended_at=max(end for _, end, _ in group),
            )
        )
        phase_of.update(dict.fromkeys(members, number))
    placed = tuple(dataclasses.replace(t, phase=phase_of.get(t.trainer, 0)) for t in trainers)
    return tuple(phases), placed
