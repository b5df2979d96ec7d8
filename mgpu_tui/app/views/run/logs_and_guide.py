"""The lower half of the Run view: the chosen mode's guide (what it does, its demo's source) or the
run's logs, one in place of the other, and the keys that act on them: v, /, l, W, Ctrl+S, and x,
which stops the rank whose logs are shown. The Run view (view.py) is this, with the run above."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from mgpu_tui.app.views.confirm import Confirm
from mgpu_tui.app.views.run.form import RunForm
from mgpu_tui.app.views.switcher import View
from mgpu_tui.app.widgets.log_view import LogView
from mgpu_tui.app.widgets.mode_guide import ModeGuide
from mgpu_tui.console import plain
from mgpu_tui.engine.planning.modes import MODES, SCRIPT
from mgpu_tui.engine.protocol.text import plain_line

if TYPE_CHECKING:
    from mgpu_tui.engine.launch.spec import LaunchSpec


class LogsAndGuide(View):
    """The guide or the logs; ``run_dir``: the run shown's folder (saved logs are named after it)."""

    run_dir = ""

    @property
    def form(self) -> RunForm:
        return self.query_one(RunForm)

    def on_select_changed(self, event) -> None:
        """A mode chosen in the form: its guide (a user's own program: what it is, its source)."""
        if event.select.id != "mode":
            return
        guide = self.query_one(ModeGuide)
        if event.value in MODES:
            guide.show(MODES[event.value])
        elif event.value == SCRIPT.name and self.form.program is not None:
            guide.show_program(self.form.program)
        else:
            return
        self.show_guide(True)

    def _guide_for(self, spec: LaunchSpec) -> None:
        """What v shows for the run shown: its mode's guide, or a user's program's own (never the
        form's last choice: the form, filled with the run, posts no choice)."""
        guide = self.query_one(ModeGuide)
        if spec.program:
            guide.show_program(spec)
        elif spec.mode in MODES:
            guide.show(MODES[spec.mode])

    def show_guide(self, shown: bool | None = None) -> None:
        """Show the mode's guide in place of the logs (None: the other one of the two)."""
        guide = self.query_one(ModeGuide)
        shown = not guide.display if shown is None else shown
        guide.display = shown
        self.query_one(LogView).display = not shown

    # ---- keys (RunView.BINDINGS names them; the app forwards them to the view shown) ----------

    def action_search_logs(self) -> None:
        """/: the logs shown (not the guide), the cursor in their search."""
        self.show_guide(False)
        self.query_one(LogView).focus_search()

    def action_filter_logs(self) -> None:
        """l: the logs shown, their rank filter open to choose one rank (or all)."""
        self.show_guide(False)
        self.query_one(LogView).choose_rank()

    def action_wrap_logs(self) -> None:
        """W: the logs' long lines wrap, or scroll sideways."""
        self.show_guide(False)
        wraps = self.query_one(LogView).toggle_wrap()
        self.app.notify("Long log lines wrap" if wraps else "Long log lines scroll sideways", timeout=2)

    def action_save_logs(self) -> None:
        """Ctrl+S: the log lines shown (this rank's, this search's) into a new file here."""
        name = Path(self.run_dir).name if self.run_dir else "run"
        try:
            path = self.query_one(LogView).save(Path.cwd(), plain_line(name, 80).replace(" ", "_"))
        except OSError as exc:
            self.app.notify(plain(str(exc)), title="Not saved", severity="error", markup=False)
            return
        self.app.notify(plain(f"Saved the lines shown to {path}"), markup=False)

    def action_stop_rank(self) -> None:
        """x: stop the rank whose logs are shown (l chooses it), after a question: SIGTERM to its
        process, as if it died on its own, so that what follows is what the launcher does then."""
        rank = self.query_one(LogView).rank_shown()
        jobs = getattr(self.app, "jobs", None)
        if jobs is None or not jobs.runs.owns_active:
            self.app.notify("Only a run this app started, while it goes, has ranks to stop.", title="x")
            return
        if rank is None:
            self.app.notify("Choose the rank first: l, then the rank; then x.", title="Which rank?")
            return
        pid = jobs.runs.rank_processes().get(rank, (None, None))[0]
        process = f" (pid {pid})" if pid is not None else ""

        def answered(yes: bool | None) -> None:
            if yes:
                jobs.runs.request_rank_stop(rank)
                self.rank_stopping(rank)

        question = (
            f"Stop rank {rank}{process}? It gets SIGTERM, as if it died on its own: the launcher "
            "then stops the others and the run fails with it as the cause."
        )
        self.app.push_screen(Confirm(question), answered)

    def rank_stopping(self, rank: int) -> None:
        """The user said yes to stopping ``rank``: the view names it from its next frame on."""

    def action_toggle_guide(self) -> None:
        """v: the chosen mode's guide and demo source, or the logs."""
        self.show_guide()
