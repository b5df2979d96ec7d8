"""The run controls: mode (with whether it can run here), ranks, steps, batch, device, AMP; start and stop."""

from __future__ import annotations

import argparse
import shlex
from dataclasses import replace
from pathlib import Path

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.message import Message
from textual.widget import Widget
from textual.widgets import Button, Checkbox, Input, Label, Select

from mgpu_tui.app.messages import StartRequested
from mgpu_tui.app.widgets.tick_box import TickBox
from mgpu_tui.console import plain
from mgpu_tui.engine.launch import options
from mgpu_tui.engine.launch.options import RUN_ROOT
from mgpu_tui.engine.launch.priority import UI_RANK_NICE
from mgpu_tui.engine.launch.spec import LaunchSpec, as_device
from mgpu_tui.engine.machine.host import Host
from mgpu_tui.engine.planning.defaults import DEFAULTS
from mgpu_tui.engine.planning.modes import MODES, SCRIPT, availability
from mgpu_tui.engine.planning.shapes import MODELS
from mgpu_tui.engine.protocol.text import plain_line, short_line
from mgpu_tui.errors import UsageError

DEVICE_OPTIONS = [("auto", "auto"), ("cpu", "cpu"), ("cuda", "cuda")]
MODEL_OPTIONS = [(name, name) for name in ("mlp", *MODELS)]  # the workloads (engine/planning/shapes.py)
NARROW = 120  # columns under which the form takes two rows
ONE_ROW_WITH_SHARING = 180  # the same, where the form has its share-GPUs box (a machine with a GPU)


def one_row(label: str) -> Text:
    """A list entry that stays on one row, cut with … where it is too long; as plain text, since a
    program's path and arguments (a spec.json a rank rewrote) may hold anything (the one sink)."""
    return Text(plain_line(label), no_wrap=True, overflow="ellipsis")


def program_label(spec: LaunchSpec) -> str:
    """The mode list's entry for a user's own program: what Start runs, with its arguments."""
    bare = ", bare" if not spec.instrument else ""
    what = "command" if spec.command else "script"
    return f"your {what}{bare}: {short_line(spec.program_line or '', 200)}"


def chosen(select: Select) -> str:
    """A select's value (every select of the forms has one: none allows a blank)."""
    value = select.value
    if not isinstance(value, str):
        raise UsageError(f"choose a value for {select.id or 'the field'}.")
    return value


class FieldSelect(Select):
    """A list field of a form: Enter submits the form, as it does in the form's number fields; the
    arrows and space open the list (Textual's Select opens it on Enter too, so that r, Enter opened
    the mode list where the help promised a run)."""

    BINDINGS = [Binding("enter", "submit", "Start", show=False)]

    class Submitted(Message):
        """Enter on the field, its list closed."""

    def action_submit(self) -> None:
        self.post_message(self.Submitted())


# What a form's keys are, said on screen (the Run view's status line before a run: at 80 columns).
RUN_KEYS = "No run yet: ↓ lists the modes, Tab goes on to Start, Enter starts the run."


# A number field of the forms: its label, and the launch option whose type and bounds it takes
# (engine/launch/options.py: the command line's own checks).
NUMBER_FIELDS = {"nproc": ("ranks", "nproc"), "steps": ("steps", "steps"), "batch": ("batch", "batch_size")}


def whole_numbers(form: Widget, fields: dict[str, str]) -> dict[str, int]:
    """The Input with id ``field`` for each ``{field: kind}`` (a key of NUMBER_FIELDS), checked as
    the command line checks its flag. Raises UsageError with one sentence naming the first field
    that is not a number it takes."""
    numbers = {}
    for field, kind in fields.items():
        label, option = NUMBER_FIELDS[kind]
        text = form.query_one(f"#{field}", Input).value.strip()
        try:
            numbers[field] = options.OPTIONS[option].type(text)  # type: ignore[misc]
        except argparse.ArgumentTypeError as exc:
            raise UsageError(f"{label} {exc}.") from None
    return numbers


class RunForm(Horizontal):
    DEFAULT_CSS = """
    RunForm {
        height: auto;
        padding: 0 1;
    }
    /* Under 120 columns the mode takes a row of its own, so every field and Start stay in view. */
    RunForm.narrow {
        layout: vertical;
    }
    RunForm #form-fields {
        height: auto;
        width: auto;
    }
    RunForm Label {
        padding: 1 0 0 1;
    }
    RunForm #mode-row {
        height: auto;
        width: auto;
    }
    RunForm.narrow #mode-row {
        width: 1fr;
    }
    RunForm #mode {
        width: 38;
    }
    /* A row an entry in the open list: a long reason is cut, not wrapped (the guide says it whole). */
    RunForm #mode SelectOverlay {
        text-wrap: nowrap;
        text-overflow: ellipsis;
    }
    RunForm.narrow #mode {
        width: 2fr;  /* "fsdp_grad_op: on the CPU with gloo" whole at 80 columns (it wrapped) */
    }
    RunForm #device {
        width: 12;
    }
    RunForm #model {
        width: 16;  /* the longest name (gpt-1.3b) on one row: at 14 it wrapped to "gpt-1." / "3b" */
    }
    RunForm Input {
        width: 10;
    }
    RunForm #demo-args {
        width: 19;  /* beside the fields on one row; its own row's rest when narrow */
    }
    RunForm.narrow #demo-args {
        width: 1fr;
        min-width: 12;
    }
    /* Narrow: borderless fields (compact), each as wide as its longest usual value and a space. */
    RunForm.narrow Input {
        width: 6;
        padding: 0 1;
    }
    RunForm.narrow #nproc {
        width: 4;
    }
    RunForm.narrow #steps {
        width: 8;
    }
    RunForm.narrow TickBox {
        padding: 0;
        margin-left: 1;
    }
    RunForm.narrow #device {
        width: 9;
        margin-left: 1;
    }
    RunForm.narrow Label {
        padding: 0 0 0 1;
    }
    RunForm.narrow Button {
        margin-left: 1;
        min-width: 7;
        width: 7;
    }
    """

    def __init__(self, host: Host, run_root: Path = RUN_ROOT, **kwargs) -> None:
        super().__init__(**kwargs)
        self.host = host
        self.run_root = run_root
        # A user's own program shown in the form (a run of it started or reopened): the mode list's
        # SCRIPT entry, which Start runs again with the ranks and device of the form.
        self.program: LaunchSpec | None = None

    def _mode_options(self) -> list[tuple[Text, str]]:
        """The mode list's entries, a row each: a long reason is cut (…) rather than wrapped, which
        made the open list change height from one entry to the next (the guide has it whole)."""
        options = []
        for mode in MODES.values():
            here = availability(mode, self.host)
            label = f"{mode.name}: {'' if here.runnable else 'cannot run: '}{here.reason}"
            options.append((one_row(label), mode.name))
        if self.program is not None:
            options.append((one_row(program_label(self.program)), SCRIPT.name))
        return options

    def compose(self) -> ComposeResult:
        # No type-to-search: letters must stay the app's keys (q, t, r, ...), not search the list.
        with Horizontal(id="mode-row"):
            yield FieldSelect(
                self._mode_options(), value="ddp", allow_blank=False, id="mode", type_to_search=False
            )
            yield FieldSelect(MODEL_OPTIONS, value="mlp", allow_blank=False, id="model", type_to_search=False)
            # The demo's own arguments, as after `--` on the command line (run ddp -- --lr 0.1).
            yield Input("", placeholder="its arguments", id="demo-args")
        with Horizontal(id="form-fields"):
            yield from self._fields()

    def on_resize(self) -> None:
        # One row needs about 160 columns, 180 with the share-GPUs box: under that, two rows.
        narrow = self.size.width < (ONE_ROW_WITH_SHARING if self.host.has_cuda else NARROW)
        self.set_class(narrow, "narrow")
        # Narrow (80x24): fields without borders, a row each instead of three, so that after a run
        # the result panel under the form is not cut (it showed two lines at 80x24).
        fields: list[Input | Select | Button | Checkbox] = [
            *self.query(Input),
            *self.query(Select),
            *self.query(Button),
            *self.query(Checkbox),
        ]
        for field in fields:
            field.compact = narrow

    def _fields(self) -> ComposeResult:
        yield Label("ranks", id="nproc-label")
        yield Input(str(DEFAULTS.cpu_ranks), id="nproc", restrict=r"[0-9]*", max_length=3)
        yield Label("steps", id="steps-label")
        yield Input(str(DEFAULTS.steps), id="steps", restrict=r"[0-9]*", max_length=9)  # the CLI's default
        yield Label("batch", id="batch-label")
        yield Input(str(DEFAULTS.batch_size), id="batch", restrict=r"[0-9]*", max_length=7)
        yield FieldSelect(DEVICE_OPTIONS, value="auto", allow_blank=False, id="device", type_to_search=False)
        yield TickBox("AMP", id="amp")
        if self.host.has_cuda:  # rehearse a bigger box's job: ranks take the GPUs round-robin
            yield TickBox("share GPUs", id="share-gpus")
        yield Button("Start", id="start", variant="success")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id != "start":
            return
        event.stop()
        self.start()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        """Enter in a field starts the run, as the Start button does."""
        event.stop()
        self.start()

    def on_field_select_submitted(self, event: FieldSelect.Submitted) -> None:
        event.stop()
        self.start()

    def start(self) -> None:
        try:
            spec = self.spec()
        except UsageError as exc:
            self.app.notify(plain(str(exc)), title="Cannot start", severity="error", markup=False)
            return
        self.post_message(StartRequested(spec))

    def spec(self) -> LaunchSpec:
        """The launch the form describes; UsageError with one sentence when a field is wrong."""
        name = chosen(self.query_one("#mode", Select))
        if name == SCRIPT.name and self.program is not None:  # the script as it ran, on these ranks
            device = as_device(chosen(self.query_one("#device", Select)))
            again = replace(self.program, device=device, nice=UI_RANK_NICE, run_root=self.run_root)
            if again.command:  # a command starts its own ranks: it runs again as it is
                return again
            return replace(again, nproc=whole_numbers(self, {"nproc": "nproc"})["nproc"])
        numbers = whole_numbers(self, {"nproc": "nproc", "steps": "steps", "batch": "batch"})
        mode = MODES[name]
        try:
            demo_args = tuple(shlex.split(self.query_one("#demo-args", Input).value))
        except ValueError as exc:
            raise UsageError(f"the demo's own arguments cannot be read: {exc}.") from None
        return LaunchSpec(
            demo_args=demo_args,
            mode=mode.name,
            nproc=numbers["nproc"] if mode.multi_process else None,
            steps=numbers["steps"],
            batch_size=numbers["batch"],
            device=as_device(chosen(self.query_one("#device", Select))),
            amp=self.query_one("#amp", Checkbox).value,
            model=chosen(self.query_one("#model", Select)),
            share_gpus=share.value if (share := self._share_gpus()) is not None else False,
            nice=UI_RANK_NICE,  # the screen must answer keys whatever the ranks do
            run_root=self.run_root,
        )

    def _share_gpus(self) -> Checkbox | None:
        found = self.query("#share-gpus")
        return found.first(Checkbox) if found else None

    def fill(self, spec: LaunchSpec, nproc: int) -> None:
        """Show a run started from elsewhere (``mgpu-tui run ... --tui``) or reopened as the form's
        values, so that Start runs it again; a user's own script becomes the mode list's last entry."""
        mode = self.query_one("#mode", Select)
        # Set here, not chosen: no Changed (the Run view would take it for a choice and put the
        # chosen mode's guide over the run's logs); the fields follow the mode all the same.
        with self.prevent(Select.Changed):
            if spec.program:
                self.program = spec
                mode.set_options(self._mode_options())
                mode.value = SCRIPT.name
            elif spec.mode in MODES:
                mode.value = spec.mode
        self._fields_for(chosen(mode))
        if spec.model in dict(MODEL_OPTIONS) and not spec.model_args:  # a shape of its own is no entry
            self.query_one("#model", Select).value = spec.model
        self.query_one("#demo-args", Input).value = "" if spec.program else shlex.join(spec.demo_args)
        self.query_one("#nproc", Input).value = str(nproc)
        self.query_one("#steps", Input).value = str(spec.steps)
        self.query_one("#batch", Input).value = str(spec.batch_size)
        self.query_one("#device", Select).value = spec.device
        self.query_one("#amp", Checkbox).value = spec.amp
        if (share := self._share_gpus()) is not None:
            share.value = spec.share_gpus

    def on_select_changed(self, event: Select.Changed) -> None:
        if event.select.id == "mode":
            self._fields_for(str(event.value))

    def _fields_for(self, mode: str) -> None:
        """A user's own program says its own model, steps, batch and precision (a command its ranks
        too): those fields are not shown while it is chosen, and nothing of theirs is used."""
        own = mode == SCRIPT.name
        for field in ("#model", "#demo-args", "#steps", "#steps-label", "#batch", "#batch-label", "#amp"):
            self.query_one(field).display = not own
        command = own and self.program is not None and bool(self.program.command)
        for field in ("#nproc", "#nproc-label"):
            self.query_one(field).display = not command

    def running(self, active: bool) -> None:
        # Out of the way while a run goes (s stops it): its fields cannot change a running
        # run, the logs get the rows, and a tab switch has some forty fewer widgets to show.
        self.display = not active
