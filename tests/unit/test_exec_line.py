"""`mgpu-tui exec`'s line read in process (commands/launchers/exec.py): a missing or unknown command, an
option of its own put after it, an unknown option, each one sentence and exit 2, nothing started;
and the launch line that does not start what it seems to (accelerate launch --cpu)."""

import pytest

from conftest import cli_in_process
from mgpu_tui.commands.launchers.exec import read_exec_line, what_it_starts


@pytest.mark.parametrize(
    "argv, said",
    [
        ([], "give the command to run"),
        (["--", "no-such-program-here"], "no-such-program-here: command not found"),
        (["--", "./nothing.sh"], "./nothing.sh: no such executable file"),
        (["--bogus", "--", "true"], "unknown option(s): --bogus"),
        (["true", "--json", "--"], "'true' stands before --"),
        # Issue 56: python's missing script, before anything starts (on 8177ed0 the run started,
        # its folder was made, python's own message printed five times, and it exited 1).
        (["--", "python", "nope.py"], "nope.py: no such file, so python cannot run it."),
        (["--", "python3", "-X", "dev", "-u", "nope.py", "--lr", "1"], "nope.py: no such file"),
    ],
)
def test_a_bad_exec_line_is_one_sentence_and_exit_2(capsys, tmp_path, monkeypatch, argv, said):
    monkeypatch.chdir(tmp_path)
    code, out, err = cli_in_process(capsys, "exec", *argv)
    assert code == 2 and said in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "runs").exists()  # nothing was started, nothing left behind


def test_the_command_is_what_follows_the_options_with_or_without_a_double_dash(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("")
    args, command = read_exec_line(["--json", "--name", "x", "--", "python", "train.py", "--", "--lr", "1"])
    assert args.json and args.name == "x" and command == ["python", "train.py", "--", "--lr", "1"]
    args, command = read_exec_line(["--quiet", "python", "-c", "pass"])
    assert args.quiet and command == ["python", "-c", "pass"]


def test_accelerate_launch_cpu_with_several_processes_is_said_to_start_one():
    said = what_it_starts(["accelerate", "launch", "--cpu", "--num_processes", "2", "train.py"])
    assert said is not None and "starts one process" in said and "ACCELERATE_USE_CPU=1" in said
    assert what_it_starts(["accelerate", "launch", "--multi_gpu", "--num_processes", "2", "t.py"]) is None
    assert what_it_starts(["/venv/bin/accelerate", "launch", "--cpu", "t.py"]) is None


def test_only_a_python_lines_script_is_looked_for_and_only_where_it_names_one():
    from mgpu_tui.commands.launchers.exec import missing_script

    assert missing_script(["python", "-u", "gone.py"]) == "gone.py"
    assert missing_script(["/usr/bin/python3.11", "-W", "error", "gone.py"]) == "gone.py"
    assert missing_script(["python", "-m", "gone"]) is None  # a module: python looks for it
    assert missing_script(["python", "-c", "print(1)"]) is None
    assert missing_script(["python", "-"]) is None  # stdin
    assert missing_script(["python"]) is None
    assert missing_script(["torchrun", "--nproc-per-node", "2", "gone.py"]) is None  # its own words
    assert missing_script(["pythonista", "gone.py"]) is None
