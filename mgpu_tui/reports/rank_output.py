"""The ranks' own output on the console while a run goes, as torchrun's ``--tee`` shows it.

Each line is prefixed with its rank once (``[rank 3] ...``; a line the reporter already
prefixed keeps its own), stdout to stdout and stderr to stderr (both to stderr when stdout
is for the JSON summary), its control characters made visible: the ranks are the user's
code, and a rank must not be able to clear the screen or retitle the terminal. On a
terminal the live progress line is cleared first and drawn again after, so the two never
mix. When a run ends without a single step reported, each rank's last lines say why
(a script that printed "not enough GPUs" and exited 0, say).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Collection

from mgpu_tui.console import plain
from mgpu_tui.engine.protocol.folder import read_capped
from mgpu_tui.engine.protocol.rundir import JOB_OUTPUT, RankFiles, RunDir

LAST_LINES = 8
MAX_TAIL_BYTES = 64 * 1024


def parse_ranks_filter(text: str | None) -> frozenset[int] | None:
    """``--ranks-filter 0,3`` as a set of ranks; None for every rank. ValueError for bad input."""
    if text is None:
        return None
    ranks = frozenset(int(part) for part in text.split(",") if part.strip())
    if not ranks or min(ranks) < 0:
        raise ValueError(text)
    return ranks


class RankOutput:
    def __init__(
        self,
        *,
        ranks: Collection[int] | None,
        rank_offset: int = 0,
        json_stdout: bool = False,
        clear_progress: Callable[[], None] = lambda: None,
    ) -> None:
        self.ranks = ranks  # None: every rank
        self.rank_offset = rank_offset  # a local rank + this = the global rank (several nodes)
        self.out = sys.stderr if json_stdout else sys.stdout
        self.clear_progress = clear_progress

    def show(self, lines: list[tuple[int, str, str]], dropped: int) -> None:
        """Print what the ranks wrote since the last call (local rank, stream, text)."""
        shown = [
            (local + self.rank_offset if local != JOB_OUTPUT else local, stream, text)
            for local, stream, text in lines
            if self.ranks is None or local + self.rank_offset in self.ranks
        ]
        if not shown and not dropped:
            return
        self.clear_progress()
        if dropped:
            print(
                f"mgpu-tui: … {dropped:,} lines of the ranks' output not shown (all are in the run "
                "directory's logs)",
                file=sys.stderr,
            )
        for rank, stream, text in shown:
            prefix = (
                f"[rank {rank}] " if rank != JOB_OUTPUT else ""
            )  # a command's own output: as it printed it
            line = plain(text if text.startswith(prefix) else prefix + text)
            print(line, file=sys.stderr if stream == "stderr" else self.out)
        self.out.flush()


def last_lines(
    run_dir: RunDir, rank_offset: int = 0, count: int = LAST_LINES, *, command: bool = False
) -> list[str]:
    """Each rank's last lines (stdout and stderr), for a run that ended without a step; for a
    command (mgpu-tui exec), the last lines of its own output."""
    if command:
        tail = _tail(run_dir.command_output(), count)
        return ["the command printed last:" if tail else "the command printed nothing.", *tail]
    out = []
    for local, files in sorted(run_dir.rank_files().items()):
        tail = _tail(files, count)
        rank = local + rank_offset
        out.append(f"rank {rank} printed last:" if tail else f"rank {rank} printed nothing.")
        out += tail
    return out


def _tail(files: RankFiles, count: int) -> list[str]:
    """The last ``count`` lines that say something, of stdout then stderr, indented, as text."""
    lines = []
    for path in (files.stdout, files.stderr):
        try:
            lines += read_capped(path, MAX_TAIL_BYTES, tail=True).splitlines()
        except OSError:
            continue
    return [plain(f"  {line}") for line in lines if line.strip()][-count:]
