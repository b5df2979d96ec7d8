"""What the console says while a run goes, each thing once, above the progress line: another node
joined, a straggler, a verdict (why the job is slow), ranks silent with no evidence of a hang, a
stall found (a run that goes on: --on-stall report); and the ranks' own output, as asked."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from mgpu_tui.console import plain
from mgpu_tui.engine.run.watched import RunState

if TYPE_CHECKING:
    from mgpu_tui.engine.run.lifecycle import Run
    from mgpu_tui.reports.rank_output import RankOutput


class RunNews:
    def __init__(self, progress, output: RankOutput | None) -> None:
        self.progress, self.output = progress, output
        self.named: set[int] = set()  # stragglers already said, while the run goes
        self.found: set[tuple[str, tuple[int, ...]]] = set()  # verdicts already said (kind, ranks)
        self.said_stall = False
        self.said_silent: set[int] = set()  # ranks whose silence was said (said again once they moved)
        self.heard: set[int] = set()  # other nodes already said to have joined

    def _say(self, text: str) -> None:
        self.progress.clear()
        print(plain(f"mgpu-tui: {text}"), file=sys.stderr)

    def on_poll(self, run: Run) -> None:
        """Run.wait's callback, after each poll."""
        for node in run.nodes():
            if not node.here and node.host is not None and node.node not in self.heard:
                self.heard.add(node.node)
                self._say(f"node {node.node} ({node.host}, ranks {node.ranks}) joined")
        stats = run.stats()
        for straggler in stats.stragglers:
            if straggler.rank not in self.named:
                self.named.add(straggler.rank)
                self._say(f"straggler: {straggler.describe()}")
        for verdict in stats.verdicts:
            if (verdict.kind, verdict.ranks) not in self.found:
                self.found.add((verdict.kind, verdict.ranks))
                self._say(verdict.text + (f" (try: {verdict.hint})" if verdict.hint else ""))
        quiet = {r.rank for r in run.silent}
        if quiet - self.said_silent and not run.stall:
            who = ", ".join(f"rank {r.rank} ({r.silent_s:.0f} s)" for r in run.silent)
            self._say(
                f"silent: {who}; no evidence of a hang yet (another rank moves, or the flight records "
                "show none): shown, not acted on"
            )
        self.said_silent = quiet
        if run.stall is not None and not self.said_stall and run.resolved.on_stall == "report":
            self.said_stall = True  # a stall that does not stop the run is said the moment it is found
            self._say(f"{run.stall.root_cause().headline()} (the run goes on: --on-stall report)")
        lines, dropped = run.drain_log_lines()
        if self.output is not None:
            self.output.show(lines, dropped)
        progress = self.progress
        if run.state is not RunState.VERIFYING and not progress.said_verifying:
            progress.update(run)
        elif not progress.said_verifying:  # the ranks are done: the progress line ends here
            progress.end()
            print("mgpu-tui: verifying against the single-device baseline", file=sys.stderr)
            progress.said_verifying = True
