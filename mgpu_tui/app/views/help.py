"""? : what every key does."""

from rich.markup import escape
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from mgpu_tui.logs import app_log_path

HELP = """\
[b]mgpu-tui[/b]: every PyTorch multi-GPU strategy, run on this machine.
Escape or ? closes this help; the arrows and PgDn scroll it.

[b]The views[/b]
  d   Dashboard: every GPU, the host, the run's rank processes
  t   Topology: how GPUs talk (NVLink, PCIe, sockets), or the host
  r   Run: a mode explained, with its demo's code; Enter starts it
      (Tab goes through the fields to Start; ↓ opens a list); then
      every rank, its charts and its logs
  c   Compare: several modes on the same model and batch, one table
      (space ticks a mode; Enter compares); before they run, the
      memory each needs and whether it fits
  h   Runs: the runs kept in the run folder; Enter opens one; m
      shows a compared run's comparison again

[b]Keys[/b]
  s   stop the run or comparison (every rank); a run started
      elsewhere is stopped by its own monitor, after you say yes
  v   Run view: the mode's guide and code, or the logs; Compare view:
      the highlighted mode's demo source, or not
  f   Compare view on a short terminal: its settings, or its results
  w   Run view: the charts over the whole run, or the latest steps
  /   Run view: search the logs (Escape leaves the search)
  l   Run view: the logs of one rank, or of all (a list to choose)
  o   Run view: sort the ranks by their next column (rank, samples/s,
      step, loss, peak memory): the one to look at first on top
  n   Run view of a job over 4 nodes or more (a row a node, the worst
      first): open the next node's ranks; N closes it
  W   Run view: long log lines wrap, or scroll sideways
  Ctrl+S  Run view: save the log lines shown (that rank's, that
      search's) into a new file in the current folder
  x   Run view: stop the rank whose logs are shown (SIGTERM, after you
      say yes), as if it died: the launcher then stops the others
  g   an opened run's telemetry: the next GPU
  ?   this help      q   quit (asks first while a run is going)
  Ctrl+Q, Ctrl+C   quit, as q does
  Esc leave a text field, so that the keys above work again

[b]Each mode[/b], what it holds and sends: docs/modes.md#MODE
(ddp, fsdp, tp, ...), after the PyTorch tutorials on distributed
and parallel training.

The logs: the mouse wheel (or arrows and PgUp) scrolls back and
holds still; End follows the newest again. Every line every rank
printed is kept in the run directory (runs/ by default), with the
run's own log, mgpu-tui.log. The app's own log: {log}"""


class HelpScreen(ModalScreen):
    DEFAULT_CSS = """
    HelpScreen {
        align: center middle;
    }
    #help {
        width: 100%;
        max-width: 90;
        height: auto;
        max-height: 100%;
        padding: 1 2;
        border: thick $accent;
        background: $surface;
    }
    """
    BINDINGS = [("escape", "dismiss", "Close"), ("question_mark", "dismiss", "Close")]

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help"):
            # The text is markup; a path is not, so it is escaped (a folder may be named "[b]").
            yield Static(HELP.replace("{log}", escape(str(app_log_path()))))
