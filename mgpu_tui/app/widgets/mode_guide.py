"""One mode explained where it is chosen: what it does, when to choose it, what it costs, what is
real on this machine, and its demo's source beside it, to read while it runs.

Every text comes from the catalogue (engine/planning/modes.py), which `mgpu-tui list` shows too;
the source is the demo file itself, found where the installed package's import would find it and
read (never imported: that would load torch into the app).
"""

from __future__ import annotations

from functools import lru_cache
from importlib.util import find_spec
from pathlib import Path

from rich.syntax import Syntax
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, ScrollableContainer, VerticalScroll
from textual.widgets import Static

from mgpu_tui.engine.launch.spec import LaunchSpec
from mgpu_tui.engine.machine.host import Host
from mgpu_tui.engine.planning.modes import Mode, availability
from mgpu_tui.engine.protocol.folder import read_bytes
from mgpu_tui.engine.protocol.text import plain

DOCS = "docs/modes.md"
SCRIPT_DOCS = "docs/your-script.md"
MAX_SOURCE_BYTES = 256 * 1024


def found_file(module: str) -> Path | None:
    """The file an import of ``module`` would run: found, not imported (its package is)."""
    try:
        spec = find_spec(module)
    except (ImportError, ValueError):
        return None
    return Path(spec.origin) if spec is not None and spec.origin else None


def demo_file(demo: str) -> Path | None:
    """The file ``python -m mgpu_tui.demos.DEMO`` runs (demos/ keeps its modes' scripts in a folder
    per family, on the package's search path)."""
    return found_file(f"mgpu_tui.demos.{demo}")


def demo_title(demo: str) -> str:
    """The demo's path under demos/, as the repository shows it: ``demos/data_parallel/ddp.py``."""
    file, package = demo_file(demo), found_file("mgpu_tui.demos")
    if file is None or package is None:
        return f"the demo {demo}"
    return f"demos/{file.relative_to(package.parent).as_posix()}"


@lru_cache(maxsize=16)
def demo_source(demo: str) -> str:
    """The demo's own file, as installed (a few KiB; capped all the same)."""
    file = demo_file(demo)
    if file is None:
        return f"# the demo {demo!r} is not installed"
    try:
        return read_bytes(file, MAX_SOURCE_BYTES).decode("utf-8", "replace")
    except OSError as exc:
        return f"# the demo's source could not be read: {exc}"


def python_code(source: str) -> Syntax:
    """Python source, highlighted, with line numbers (long lines scroll sideways, never wrap)."""
    return Syntax(
        source, "python", line_numbers=True, word_wrap=False, theme="ansi_dark", background_color="default"
    )


def demo_code(mode: Mode) -> Syntax:
    """The demo's source, highlighted: the training loop it runs."""
    return python_code(demo_source(mode.demo))


def program_source(file: Path | None) -> tuple[Syntax | Text, str]:
    """A user's script's source, highlighted, and the pane's title; a sentence where none is shown."""
    if file is None:
        return Text("A command's source is its own: nothing of it is shown here."), "its source"
    try:
        raw = read_bytes(file, MAX_SOURCE_BYTES)
    except OSError as exc:  # (Unreadable too: a link, a FIFO, a folder)
        return Text(plain(f"Its source cannot be read here: {exc}", 500)), f"{file}"
    return python_code(plain(raw.decode("utf-8", "replace"))), f"{file}{SCRIPT_SUFFIX}"


SCRIPT_SUFFIX, DEMO_SUFFIX = ": the script it runs", ": the training loop it runs"


def fitted_title(title: str, width: int) -> str:
    """A pane's title within ``width`` columns: whole, or without what follows its path (": the
    training loop it runs"), or the path's end after "…" (at 80 columns the title was cut)."""
    if len(title) <= width or width <= 1:
        return title
    for suffix in (DEMO_SUFFIX, SCRIPT_SUFFIX):
        title = title.removesuffix(suffix)
    return title if len(title) <= width else "…" + title[-(width - 1) :]


def explanation(mode: Mode, host: Host) -> Text:
    """The catalogue's words on a mode, and what it does on this machine."""
    here = availability(mode, host)
    text = Text()
    text.append(f"{mode.title}\n", style="bold")
    for heading, body in (
        ("What it does", mode.teaches),
        ("Choose it when", mode.choose),
        ("What it costs", mode.costs),
    ):
        text.append(f"\n{heading}: ", style="bold")
        text.append(body)
    text.append("\n\nOn this machine: ", style="bold")
    if not here.runnable:
        text.append(f"cannot run: {here.reason}.", style="red")
    elif mode.cpu_path == "degenerate" and here.device == "cpu":
        text.append(f"it runs, but degenerate: {mode.cpu_note}", style="yellow")
    else:
        text.append(f"real, {here.reason}.", style="green")
    text.append(f"\n\nMore: {DOCS}#{mode.name}", style="dim")
    return text


class ModeGuide(Horizontal):
    DEFAULT_CSS = """
    ModeGuide {
        height: 1fr;
    }
    ModeGuide #guide-text {
        width: 2fr;
        max-width: 60;
        padding: 0 1;
        border: round $primary-background;
    }
    ModeGuide #guide-source {
        width: 3fr;
        border: round $primary-background;
    }
    ModeGuide #guide-code {
        width: auto;
    }
    """

    def __init__(self, host: Host, **kwargs) -> None:
        super().__init__(**kwargs)
        self.host = host
        self.mode: Mode | None = None
        self._title = ""  # the source pane's title whole (fitted to its width as it is drawn)

    def on_resize(self) -> None:
        self.call_after_refresh(self._fit_title)  # once the source pane has its new width

    def _fit_title(self) -> None:
        source = self.query_one("#guide-source", ScrollableContainer)
        room = source.size.width - 4 if source.size.width else len(self._title)  # the corners, a space each
        # A Text: a path's brackets are never markup.
        source.border_title = Text(fitted_title(self._title, room))

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="guide-text"):
            yield Static("", id="guide-explanation")
        with ScrollableContainer(id="guide-source"):  # long lines scroll sideways, not wrap
            yield Static("", id="guide-code")

    def show_program(self, spec: LaunchSpec) -> None:
        """A user's own program: what it is and how it was started, and its source where it is a
        file here (read as the untrusted text it may be: bounded, plain, never through a link)."""
        self.mode = None
        what = "command" if spec.command else "script"
        line = plain(spec.program_line or "", 2000)
        text = Text()
        text.append(f"Your own {what}\n", style="bold")
        text.append("\nIt runs as: ", style="bold")
        text.append(line)
        text.append("\n\nWhat is shown: ", style="bold")
        text.append(
            "its ranks' logs, steps, throughput, loss and memory, as the watch sees them in torch; "
            "no demo's fields apply (it says its own steps and batch)."
        )
        text.append(f"\n\nMore: {SCRIPT_DOCS}", style="dim")
        text.append("   v: the logs instead", style="dim")
        self.query_one("#guide-explanation", Static).update(text)
        source = self.query_one("#guide-source", ScrollableContainer)
        file = Path(spec.script) if spec.script and not spec.command else None
        code, said = program_source(file)
        self._title = plain(said, 200)
        self._fit_title()
        self.query_one("#guide-code", Static).update(code)
        source.scroll_home(animate=False)

    def show(self, mode: Mode) -> None:
        if mode == self.mode:
            return
        self.mode = mode
        self.query_one("#guide-explanation", Static).update(
            explanation(mode, self.host).append("   v: the logs instead", style="dim")
        )
        source = self.query_one("#guide-source", ScrollableContainer)
        self._title = f"{demo_title(mode.demo)}{DEMO_SUFFIX}"
        self._fit_title()
        self.query_one("#guide-code", Static).update(demo_code(mode))
        source.scroll_home(animate=False)
