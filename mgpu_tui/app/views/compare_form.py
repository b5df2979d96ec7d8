"""The Compare view's form: the modes (each greyed out where the plan says it cannot fit), the
settings every compared run shares, the buttons, the progress and the status; and the spec they
describe (``template``), checked into one sentence when wrong."""

from __future__ import annotations

from pathlib import Path

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, Input, Label, ProgressBar, Select, SelectionList, Static

from mgpu_tui.app.views.run.form import DEVICE_OPTIONS, MODEL_OPTIONS, chosen, whole_numbers
from mgpu_tui.app.widgets.text_panel import TextPanel
from mgpu_tui.app.widgets.tick_box import TickBox, TickList
from mgpu_tui.console import fmt_bytes
from mgpu_tui.engine.launch.spec import LaunchSpec, as_device
from mgpu_tui.engine.machine.host import Host
from mgpu_tui.engine.planning.defaults import DEFAULTS
from mgpu_tui.engine.planning.memory import ModePlan, needed
from mgpu_tui.engine.planning.modes import MODES, availability
from mgpu_tui.errors import UsageError

DEFAULT_MODES = ("ddp", "fsdp", "pipeline")


class CompareForm(Horizontal):
    """The form (its layout is the Compare view's CSS: it folds with the view)."""

    def __init__(self, host: Host, run_root: Path, **kwargs) -> None:
        super().__init__(**kwargs)
        self.host = host
        self.run_root = run_root  # where the compared runs go
        self.prompts: dict[str, str] = {}  # each mode's line in the list, before the plan's remark
        self.greyed: set[str] = set()  # the modes the plan says cannot fit

    def compose(self) -> ComposeResult:
        choices = []
        for mode in MODES.values():
            here = availability(mode, self.host)
            where = "" if here.runnable else "(cannot run here) "
            self.prompts[mode.name] = f"{mode.name}  {where}{mode.title}"
            choices.append((self.prompts[mode.name], mode.name, here.runnable and mode.name in DEFAULT_MODES))
        yield TickList(*choices, id="compare-modes")
        with Vertical(id="compare-settings"):
            with Horizontal(classes="compare-field compare-setting"):
                yield Label("ranks")
                yield Input(str(DEFAULTS.cpu_ranks), id="compare-nproc", restrict=r"[0-9]*", max_length=3)
                yield Label("steps")
                yield Input(str(DEFAULTS.steps), id="compare-steps", restrict=r"[0-9]*", max_length=7)
                yield Label("batch")
                yield Input(str(DEFAULTS.batch_size), id="compare-batch", restrict=r"[0-9]*", max_length=7)
            with Horizontal(classes="compare-field compare-setting"):
                yield Select(
                    DEVICE_OPTIONS,
                    value="auto",
                    allow_blank=False,
                    id="compare-device",
                    type_to_search=False,
                )
                yield TickBox("AMP", id="compare-amp")
                yield Select(
                    MODEL_OPTIONS,
                    value="mlp",
                    allow_blank=False,
                    id="compare-model",
                    type_to_search=False,
                )
            with Horizontal(classes="compare-field"):
                yield Button("Compare", id="compare-start", variant="success")
                yield Button("Stop", id="compare-stop", variant="error", disabled=True)
                yield Static("f settings", id="compare-unfold")
                yield ProgressBar(total=1, id="compare-progress", show_eta=False)
            yield TextPanel(
                "Choose modes (space), then Compare: one after another, on the same model, "
                "data and batch. Below: the memory each needs.",
                id="compare-status",
            )

    def grey_out(self, plans: list[ModePlan], shared: bool) -> None:
        """Each mode the plan says cannot fit greyed out, with what it would need; one that fits
        again as it was."""
        modes = self.query_one("#compare-modes", SelectionList)
        for index, p in enumerate(plans):
            if not p.devices:  # n/a: said in its row
                continue
            if p.fits is False:
                modes.deselect(p.mode)
                # Short enough for the list at 80 columns.
                modes.replace_option_prompt_at_index(
                    index, Text(f"{p.mode}  too big: {fmt_bytes(needed(p, shared=shared))}", style="dim")
                )
                modes.disable_option_at_index(index)
                self.greyed.add(p.mode)
            elif p.mode in self.greyed:  # fits again
                modes.replace_option_prompt_at_index(index, self.prompts[p.mode])
                modes.enable_option_at_index(index)
                self.greyed.discard(p.mode)

    def set_busy(self, active: bool) -> None:
        self.query_one("#compare-start", Button).disabled = active
        self.query_one("#compare-stop", Button).disabled = not active

    def request(self) -> tuple[list[str], LaunchSpec]:
        """The modes and the template the form describes; UsageError with one sentence when wrong."""
        modes = list(self.query_one("#compare-modes", SelectionList).selected)
        if not modes:
            raise UsageError("choose at least one mode to compare.")
        return sorted(modes, key=list(MODES).index), self.template()

    def template(self) -> LaunchSpec:
        """The spec every compared mode starts from; UsageError with one sentence when wrong."""
        numbers = whole_numbers(
            self, {"compare-nproc": "nproc", "compare-steps": "steps", "compare-batch": "batch"}
        )
        return LaunchSpec(
            mode="single",
            nproc=numbers["compare-nproc"],
            steps=numbers["compare-steps"],
            batch_size=numbers["compare-batch"],
            device=as_device(chosen(self.query_one("#compare-device", Select))),
            amp=self.query_one("#compare-amp", TickBox).value,
            model=chosen(self.query_one("#compare-model", Select)),
            run_root=self.run_root,
        )
