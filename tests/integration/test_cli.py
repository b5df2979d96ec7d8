"""The command line's contract: usage errors are one sentence and exit 2, never a traceback."""

import json
import os
import subprocess

import pytest

from conftest import CLI, run_cli


@pytest.mark.parametrize(
    "args, words",
    [
        (["run", "no-such-mode"], "unknown mode 'no-such-mode'"),
        (["run", "ddp", "--nproc", "-1"], "--nproc: must be at least 1, got -1"),
        (["run", "ddp", "--nproc", "0"], "--nproc: must be at least 1, got 0"),
        (["run", "ddp", "--nproc", "two"], "--nproc: must be a whole number, got 'two'"),
        (["run", "ddp", "--steps", "0"], "--steps: must be at least 1"),
        (["run", "ddp", "--batch-size", "-5"], "--batch-size: must be at least 1"),
        (["run", "ddp", "--device", "tpu"], "--device: invalid choice"),
        (["run", "ddp", "--device", "cuda"], "--device cuda needs an NVIDIA GPU"),
        (["run", "ddp", "--frobnicate"], "unknown option(s): --frobnicate"),
        (["run"], "give a MODE, --script PATH or --module NAME"),
        (["explode"], "invalid choice: 'explode'"),
        (["list", "--", "--x"], "only for `mgpu-tui run`"),
    ],
)
def test_usage_errors_are_one_sentence_and_exit_2(args, words, tmp_path):
    result = (
        run_cli(*args, "--run-dir", str(tmp_path))
        if args[:1] == ["run"] and len(args) > 1
        else run_cli(*args)
    )
    assert result.returncode == 2
    assert words in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert not any(tmp_path.iterdir())  # nothing was created for a refused run


def test_a_run_directory_that_cannot_be_written_is_a_usage_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    result = run_cli("run", "single", "--steps", "1", "--device", "cpu", "--run-dir", str(blocker / "x"))
    assert result.returncode == 2
    assert "cannot create a run directory" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_list_says_what_can_run_here():
    result = run_cli("list", "--json")
    assert result.returncode == 0
    modes = {m["name"]: m for m in json.loads(result.stdout)["modes"]}
    assert {"single", "ddp"} <= modes.keys()
    assert modes["ddp"]["launcher"] == "torchrun" and modes["single"]["launcher"] == "python"
    assert modes["ddp"]["runnable"] and modes["ddp"]["reason"]
    text = run_cli("list").stdout
    assert "ddp" in text and "DistributedDataParallel" in text


def test_help_and_version():
    result = run_cli("--help")
    assert result.returncode == 0 and "run" in result.stdout and "Exit codes:" in result.stdout
    assert run_cli("--version").stdout.startswith("mgpu-tui ")
    assert run_cli("run", "--help").returncode == 0


def test_a_reader_that_goes_away_ends_it_quietly():
    """`mgpu-tui plan ... | head -1`: the rest of the output has nowhere to go. No traceback, no
    sentence to a reader that is gone, and exit 1 as Python itself ends on a broken pipe."""
    reader, writer = os.pipe()
    os.close(reader)  # gone before the first line, as head is after its first
    done = subprocess.run(
        [*CLI, "plan", "--model", "gpt-125m", "--gpus", "2"],
        stdout=writer,
        stderr=subprocess.PIPE,
        text=True,
        timeout=60,
    )
    os.close(writer)
    assert done.returncode == 1 and done.stderr == ""
