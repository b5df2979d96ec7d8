"""A launch line the user wrote, run as a shell runs it (issue #55), in its parts that start no
process: the stop grace (30 s by default for exec; torchrun's own never cut short), what the job's
environment gains and keeps as bare, the signals found ignored, the exit status as a shell says it,
and the relay of a command's output: every byte to the log, a console that does not read never
blocking the job, and what it could not show said. The job's own view, bare against exec in a real
terminal: tests/integration/test_as_bare.py."""

from __future__ import annotations

import argparse
import os
import signal
import threading
from pathlib import Path

from mgpu_tui.commands.launchers import exec as exec_module
from mgpu_tui.commands.launchers.foreground import exit_status, foreground
from mgpu_tui.engine.launch import job_output
from mgpu_tui.engine.launch.command import build_command
from mgpu_tui.engine.launch.job_output import JobOutput
from mgpu_tui.engine.launch.spec import LaunchSpec, resolve
from mgpu_tui.engine.machine.host import Host
from mgpu_tui.engine.planning.defaults import DEFAULTS
from mgpu_tui.engine.protocol.rundir import RunDir

HOST = Host(cpu_count=8, gpu_count=0, gpu_note="no NVIDIA GPU", torch_available=True)


def test_execs_stop_grace_is_30_s_by_default_and_its_own_when_given(monkeypatch):
    specs = []
    monkeypatch.setattr(
        exec_module, "follow", lambda spec, args, said, as_bare: specs.append((spec, as_bare)) or 0
    )
    exec_module.exec_command(["--", "true"])
    exec_module.exec_command(["--stop-grace", "10", "--", "true"])
    assert [(spec.stop_grace, as_bare) for spec, as_bare in specs] == [(30.0, True), (10.0, True)]
    assert DEFAULTS.stop_grace == 30.0


def build(spec: LaunchSpec, *, bare: bool, env=None):
    return build_command(
        resolve(spec, HOST), RunDir(Path("runs/r1")), "abc", python="/py", cpu_count=8,
        base_env=env or {"PATH": "/bin"}, buffered_as_bare=bare,
    )  # fmt: skip


def test_the_job_gets_its_run_folder_as_an_absolute_path_and_its_own_buffering(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    command = LaunchSpec("exec", command=("python", "train.py"), stop_grace=30)
    in_front = build(command, bare=True)
    assert in_front.env["MGPU_RUN_DIR"] == str(tmp_path / "runs" / "r1")
    assert "PYTHONUNBUFFERED" not in in_front.env_changes  # as bare: a terminal's line buffering
    assert build(command, bare=False).env_changes["PYTHONUNBUFFERED"] == "1"  # the app: pipes, shown live
    assert RunDir.create("runs", "exec").path.is_absolute()


def test_the_drop_in_leaves_torchrun_its_own_shutdown_timeout(tmp_path):
    script = str(tmp_path / "t.py")
    Path(script).write_text("pass\n")
    mode_run = build(LaunchSpec("script", script=script, nproc=2), bare=False)
    assert mode_run.env_changes["TORCH_ELASTIC_SHUTDOWN_TIMEOUT"] == "5"  # mgpu-tui's own runs
    drop_in = build(LaunchSpec("script", script=script, nproc=2, stop_grace=45.0), bare=True)
    assert "TORCH_ELASTIC_SHUTDOWN_TIMEOUT" not in drop_in.env_changes


def test_a_signal_ignored_when_mgpu_tui_started_stays_ignored():
    args = argparse.Namespace(quiet=False, json=False)
    before = signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as nohup leaves it
    try:
        found = foreground(args, command=True)
    finally:
        signal.signal(signal.SIGHUP, before)
    assert signal.SIGHUP in found.ignored and (found.stdout, found.stderr) == (1, 2)
    assert (
        foreground(argparse.Namespace(quiet=False, json=True), command=True).stdout == 2
    )  # stdout: the JSON
    quiet = foreground(argparse.Namespace(quiet=True, json=False), command=True)
    assert (quiet.stdout, quiet.stderr) == (None, None)


def test_the_exit_status_is_a_shells():
    assert [exit_status(code) for code in (0, 1, 3, -signal.SIGINT, -signal.SIGKILL, None)] == [
        0, 1, 3, 130, 137, None,
    ]  # fmt: skip


def test_a_console_that_does_not_read_never_blocks_the_job_and_is_told_what_it_missed(tmp_path, monkeypatch):
    """The console is a pipe nobody reads until the job has written 3 MiB more than the queue holds:
    the job's writes all return, the log has every byte, and the console, once read, has what fit
    and one note of the rest."""
    monkeypatch.setattr(job_output, "CONSOLE_QUEUE_BYTES", 1 << 20)
    console_read, console_write = os.pipe()
    logs = (open(tmp_path / "stdout.log", "wb"), open(tmp_path / "stderr.log", "wb"))
    output = JobOutput(logs, (console_write, None))
    assert output.terminals() == (False, False)  # a pipe each: the console is no terminal
    job_out, job_err = (os.dup(fd) for fd in output.child_ends())
    output.started()
    chunk = bytes(range(256)) * 256  # 64 KiB
    line = b"step\n"  # small writes between: one that fits after a chunk was left out is left out too
    written = 0
    for _ in range(64):  # 4 MiB and 64 lines
        written += os.write(job_out, chunk)
        written += os.write(job_out, line)
    os.write(job_err, b"an error\n")
    os.close(job_out)  # every write returned, with no reader of the console: never blocked
    os.close(job_err)
    shown = bytearray()
    reader = threading.Thread(target=lambda: shown.extend(_read_all(console_read)))
    reader.start()
    assert output.finish(timeout=30)
    os.close(console_write)
    reader.join(30)
    output.close()
    assert (tmp_path / "stdout.log").read_bytes() == (chunk + line) * 64 and written == 64 * len(chunk + line)
    assert (tmp_path / "stderr.log").read_bytes() == b"an error\n"
    text = bytes(shown)
    assert text.count(b"mgpu-tui: ") == 1 and b"bytes of the job's stdout not shown here" in text
    note_at = text.index(b"\nmgpu-tui: ")
    note_end = text.index(b")\n", note_at) + 2
    assert text[note_at:note_end].endswith(f"(every byte is in {tmp_path / 'stdout.log'})\n".encode())
    dropped = int(text[note_at:note_end].split(b"\xe2\x80\xa6 ")[1].split(b" bytes")[0].replace(b",", b""))
    shown_of_the_job = text[:note_at] + text[note_end:]
    assert dropped > 0 and len(shown_of_the_job) + dropped == 64 * len(chunk + line)


def _read_all(fd: int) -> bytes:
    data = bytearray()
    while chunk := os.read(fd, 1 << 16):
        data += chunk
    return bytes(data)


def test_a_log_line_too_long_to_follow_is_said_where_the_lines_are_shown(tmp_path):
    """The app's log and the drop-in's console read the ranks' logs line by line: a line over 64 KiB
    is not shown, and says so (it vanished with no word before)."""
    from mgpu_tui.engine.run.ingest import Ingest

    run_dir = RunDir.create(tmp_path, "exec")
    files = run_dir.command_output()
    files.stdout.parent.mkdir(parents=True)
    files.stdout.write_text("before\n" + "x" * 70_000 + "\nafter\n\0cut\n")  # the last: a rank's own
    ingest = Ingest(run_dir, None, command_output=True)
    ingest.read()
    lines, dropped = ingest.drain_log_lines()
    shown = [text for _, stream, text in lines if stream == "stdout"]
    cut = f"… a line of over 64 KiB not shown (every line is in {files.stdout})"
    assert shown == ["before", cut, "after", "\0cut"] and dropped == 0
