"""The launch options, declared once (engine/launch/options.py): the command line's flags, the
demos' flags and the LaunchSpec fields they fill cannot drift apart (issue #30)."""

import dataclasses
import typing

import pytest

from mgpu_tui.engine.launch import options
from mgpu_tui.engine.launch.spec import Device, LaunchSpec
from mgpu_tui.errors import UsageError
from mgpu_tui.parser import build_parser

GIVEN = {  # a value for each option `run` takes that is a LaunchSpec field, none its default
    "nproc": "3",
    "steps": "7",
    "batch_size": "48",
    "device": "cpu",
    "accum": "2",
    "lr": "0.2",
    "warmup_steps": "2",
    "width": "96",
    "depth": "3",
    "stages": "3",
    "microbatches": "6",
    "nnodes": "2",
    "node_rank": "1",
    "rdzv_endpoint": "10.0.0.1:29400",
    "rdzv_id": "job-1",
    "max_restarts": "2",
    "master_port": "29555",
    "run_dir": "elsewhere",
    "name": "nightly",
    "stall_timeout": "12",
    "on_stall": "report",
    "sample_interval": "0.5",
    "nice": "5",
    "join_timeout": "60",
}
SWITCHES = ("share_gpus", "amp", "force")
EXEC_ONLY = ("stop_grace",)  # `exec`'s own (tests/unit/test_foreground.py), not `run`'s


def test_every_declared_option_that_is_a_spec_field_reaches_the_spec_as_given():
    fields = {f.name for f in dataclasses.fields(LaunchSpec)}
    declared = {name for name in options.OPTIONS if name in fields or name == "run_dir"}
    assert declared == set(GIVEN) | set(SWITCHES) | set(
        EXEC_ONLY
    )  # a new option gets a value here, and a test
    argv = ["run", "ddp"]
    for name, value in GIVEN.items():
        argv += [options.OPTIONS[name].flags[0], value]
    argv += [options.OPTIONS[name].flags[0] for name in SWITCHES]
    args = build_parser().parse_args(argv)
    spec = LaunchSpec(mode="ddp", **options.spec_values(args))
    for name, value in GIVEN.items():
        field = "run_root" if name == "run_dir" else name
        got = getattr(spec, field)
        assert str(got) == value or got == type(got)(value), (name, got)
    assert all(getattr(spec, name) is True for name in SWITCHES)


def test_an_option_not_given_leaves_the_specs_own_default():
    args = build_parser().parse_args(["run", "ddp"])
    assert LaunchSpec(mode="ddp", **options.spec_values(args)) == LaunchSpec(mode="ddp")


@pytest.mark.parametrize("flag, value", [("--steps", "0"), ("--batch-size", "-1"), ("--lr", "nan")])
def test_the_command_line_and_a_demo_refuse_the_same_values(flag, value):
    from mgpu_tui.demos import harness

    with pytest.raises(UsageError, match=flag):
        build_parser().parse_args(["run", "ddp", flag, value])
    with pytest.raises(SystemExit):  # a demo's own parser: argparse's usage message, exit 2
        harness.parse_args("demo", [flag, value])


def test_a_demos_defaults_are_the_specs():
    from mgpu_tui.demos import harness

    args = harness.parse_args("demo", [])
    spec = LaunchSpec(mode="ddp")
    for name in ("steps", "batch_size", "lr", "warmup_steps", "device", "accum", "width", "depth"):
        assert getattr(args, name) == getattr(spec, name), name


def test_the_device_type_is_the_declared_devices():
    assert set(typing.get_args(Device)) == set(options.DEVICES)


def test_a_modes_own_flags_are_declared_once_and_passed_as_its_demo_reads_them():
    """Issue #44: --schedule was declared twice (run and plan) and the mode flags by hand; a false
    --no-reshard-after-forward for ddp went unchecked, and its ranks died on the unknown flag."""
    parser = build_parser()

    def flags(*argv: str) -> list[str]:
        return options.mode_flags(parser.parse_args(["run", *argv]))

    assert flags("pipeline", "--schedule", "1f1b") == ["--schedule", "1f1b"]
    assert flags("dp", "--manual") == ["--manual"]
    assert flags("fsdp", "--no-reshard-after-forward") == ["--no-reshard-after-forward"]
    assert flags("fsdp", "--reshard-after-forward") == ["--reshard-after-forward"]
    assert flags("ddp") == []
    for argv in (["ddp", "--no-reshard-after-forward"], ["ddp", "--schedule", "gpipe"], ["fsdp", "--manual"]):
        with pytest.raises(ValueError, match="applies to mode"):
            flags(*argv)
    assert parser.parse_args(["plan"]).schedule == "gpipe"  # plan's default, from the one declaration
