"""? : what every key does."""

from rich.markup import escape
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static

from mgpu_tui.logs import app_log_path

HELP = """\
[b]mgpu-tui[/b]: every PyTorch multi-GPU strategy, run on this machine.

  d   Dashboard: every GPU, the host, the run's rank processes
  t   Topology: which GPUs talk over NVLink, PCIe or across the CPU socket
  r   Run: start a mode, watch every rank, its logs and its throughput
  c   Compare: run several modes on the same model and batch, one table
  h   Runs: the past runs of the run folder; Enter opens one (as `mgpu-tui open`)
  s   stop the current run or comparison (every rank); a run the app only
      follows (started elsewhere) is stopped only after you say yes
  g   the next GPU in an opened run's telemetry charts
  ?   this help          q   quit (asks first while a run is going)
  Esc leave a text field, so that the keys above work again

In the logs, the mouse wheel (or arrows and PgUp once the log has the focus)
scrolls back and holds still while lines arrive; End follows the newest again.

Every line every rank prints is kept in the run directory (runs/ by default),
even when the screen shows only the latest, with the run's own log, mgpu-tui.log.
What the app itself did and met is in {log}.

Press Escape or ? to close."""


class HelpScreen(ModalScreen):
    DEFAULT_CSS = """
    HelpScreen {
        align: center middle;
    }
    #help {
        width: 84;
        height: auto;
        padding: 1 2;
        border: thick $accent;
        background: $surface;
    }
    """
    BINDINGS = [("escape", "dismiss", "Close"), ("question_mark", "dismiss", "Close")]

    def compose(self) -> ComposeResult:
        with Vertical(id="help"):
            # The text is markup; a path is not, so it is escaped (a folder may be named "[b]").
            yield Static(HELP.replace("{log}", escape(str(app_log_path()))))
