"""The Compare view's form: the modes (each greyed out where the plan says it cannot fit), the
settings every compared run shares, the buttons, the progress and the status; and the spec they
describe (``template``), checked into one sentence when wrong."""

from __future__ import annotations

from pathlib import Path

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.widgets import Button, Input, Label, ProgressBar, Select, SelectionList, Static

from mgpu_tui.app.views.run.form import DEVICE_OPTIONS, MODEL_OPTIONS, FieldSelect, chosen, whole_numbers
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
# What the form's keys are, said on screen (its status: 3 rows of 44 columns at 80x24).
COMPARE_KEYS = (
    "Space ticks a mode, Tab goes on to Compare, Enter compares them in turn. Below: the memory each needs."
)


class CompareForm(Horizontal):
    """The form; it folds with the view (the view's classes: narrow, short, folded, compared)."""

    SCOPED_CSS = False  # its rules name the view's classes
    DEFAULT_CSS = """
    #compare-form {
        height: 14;
        padding: 0 1;
    }
    /* Results on a short terminal (80x24): the form folds to its buttons and status, f unfolds it. */
    CompareView.folded #compare-form, CompareView.folded #compare-settings {
        height: auto;
    }
    CompareView.folded #compare-modes, CompareView.folded .compare-setting {
        display: none;
    }
    #compare-unfold {
        display: none;
        width: auto;
        margin: 1 0 0 2;
        color: $text-muted;
    }
    CompareView.folded #compare-unfold {
        display: block;
    }
    CompareView.narrow #compare-progress Bar {
        width: 4;  /* and its percentage: the settings column has 44 columns at 80 */
    }
    CompareView.folded #compare-progress Bar {
        width: 20;
    }
    #compare-modes {
        width: 64;
        height: 12;
    }
    /* Under 120 columns: the modes' names (their titles are cut), so the settings keep their room. */
    CompareView.narrow #compare-modes {
        width: 34;
    }
    CompareView.narrow .compare-field Input {
        width: 8;
    }
    #compare-settings {
        width: 1fr;
        padding: 0 1;
    }
    .compare-field {
        height: 3;
    }
    .compare-field Label {
        padding: 1 0 0 1;
    }
    .compare-field Input {
        width: 10;
        padding: 0 1;  /* Textual's 0 2 left 8 columns 2 for the value: "60" read "6" after Tab */
    }
    #compare-device {
        width: 12;
    }
    #compare-model {
        width: 16;
    }
    #compare-progress {
        margin: 1 0 0 2;  /* a margin: the bar is one row high, and a padding pushed it out of sight */
        visibility: hidden;  /* until a comparison starts */
    }
    CompareView.compared #compare-progress {
        visibility: visible;
    }
    #compare-status {
        height: 3;
    }
    /* A short terminal (80x24): the form's fields without borders, a row each, and the modes' list
       of 6 rows (it scrolls): the plan's table under it shows every mode (it showed 4 of 12). */
    CompareView.short #compare-form {
        height: 6;
    }
    CompareView.short #compare-modes {
        height: 6;
    }
    CompareView.short .compare-field {
        height: 1;
        margin-bottom: 0;
    }
    CompareView.short .compare-field Label {
        padding: 0 0 0 1;
    }
    CompareView.short .compare-field Input, CompareView.short #compare-device, CompareView.short TickBox {
        margin-left: 1;
    }
    CompareView.short TickBox {
        border: none;
        padding: 0;
        height: 1;
    }
    CompareView.short Button {
        margin-right: 1;
    }
    CompareView.short #compare-progress, CompareView.short #compare-unfold {
        margin: 0 0 0 1;
    }
    CompareView.short #compare-status {
        height: 3;
    }
    CompareView.folded #compare-form {
        height: auto;
    }
    """

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
                yield FieldSelect(
                    DEVICE_OPTIONS,
                    value="auto",
                    allow_blank=False,
                    id="compare-device",
                    type_to_search=False,
                )
                yield TickBox("AMP", id="compare-amp")
                yield FieldSelect(
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
            yield TextPanel(COMPARE_KEYS, id="compare-status")

    # Enter anywhere in the form compares, as the button does.

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self._submit()

    def on_field_select_submitted(self, event: FieldSelect.Submitted) -> None:
        event.stop()
        self._submit()

    def on_tick_list_submitted(self, event: TickList.Submitted) -> None:
        event.stop()
        self._submit()

    class Submitted(Message):
        """Enter in the form: compare, as the button does (unless a comparison goes)."""

    def _submit(self) -> None:
        if not self.query_one("#compare-start", Button).disabled:
            self.post_message(self.Submitted())

    def fit(self, short: bool) -> None:
        """``short`` (a terminal under the view's FOLD_BELOW_ROWS): its fields without borders, a row
        each (the view's CSS gives the rows), so that the plan under it shows every mode."""
        for field in (*self.query(Input), *self.query(Select), *self.query(Button), *self.query(TickList)):
            field.compact = short

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

    def tick(self, modes: list[str]) -> None:
        """The list ticked as ``modes`` (a comparison shown again), where each can run here."""
        listed = self.query_one("#compare-modes", SelectionList)
        listed.deselect_all()
        for name in modes:
            if name in MODES and name not in self.greyed and availability(MODES[name], self.host).runnable:
                listed.select(name)

    def highlighted(self) -> str | None:
        """The mode under the list's cursor."""
        listed = self.query_one("#compare-modes", SelectionList)
        if listed.highlighted is None:
            return None
        value = listed.get_option_at_index(listed.highlighted).value
        return value if isinstance(value, str) else None

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
