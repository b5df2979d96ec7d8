"""mgpu-tui's own frames and threads are left out of what the user reads, taken from the real code
wherever its modules live: a traceback through the watch's wrapper of a torch function (the
root-cause panel), and a rank's stack dump written by its own dumping thread while the watch's beat
thread runs (the stall panel). The patterns that recognise them once named files that a split had
moved (engine/rank/script_watch.py into engine/rank/watch/), and a test written with the old paths
by hand still passed."""

from __future__ import annotations

import traceback

from waiting import wait_until

from mgpu_tui.engine.protocol.causes import users_frames
from mgpu_tui.engine.protocol.rundir import STACKS_REQUEST, RunDir
from mgpu_tui.engine.rank.flight_dump import FlightRecorderDump
from mgpu_tui.engine.rank.watch import stack_signature
from mgpu_tui.engine.rank.watch.script_watch import ScriptWatch
from mgpu_tui.engine.rank.watch.wrapping import around
from mgpu_tui.engine.run.causes.watchdog import readable_stacks


def users_step() -> None:
    raise RuntimeError("boom")


def test_a_traceback_through_the_watchs_wrapper_shows_the_users_frames_only():
    watched = around(users_step, before=lambda args, kwargs: None)
    try:
        watched()
    except RuntimeError:
        text = traceback.format_exc()
    assert "engine/rank/watch/wrapping.py" in text  # the real wrapper is on the way
    shown = users_frames(text)
    assert "engine/rank" not in shown
    assert "in users_step" in shown and "in test_a_traceback_through" in shown
    assert shown.endswith("RuntimeError: boom\n")


def test_the_traceback_the_cli_and_the_app_show_has_no_frame_of_the_watch_however_long():
    """Issue 56: a crash through the watch's backward showed its torch_hooks.py frame: the CLI's
    cause printed the rank's traceback whole (the app kept the user's frames only). Both now go
    through causes.py's users_frames, over the whole traceback, the app's cut after it."""
    from mgpu_tui.app.views.run.outcome import TRACEBACK_SHOWN, shown_traceback
    from mgpu_tui.engine.protocol.causes import RootCause

    watched = around(users_step, before=lambda args, kwargs: None)
    try:
        watched()
    except RuntimeError:
        text = traceback.format_exc()
    inner = text.index("  File", text.index("wrapping.py"))  # the frame the watch called
    deep = '  File "/home/u/model.py", line 7, in layer\n    x = layer(x)\n' * 100  # torch's, the user's
    long = text[:inner] + deep + text[inner:]
    cause = RootCause(1, 1, None, "RuntimeError: boom", long)
    for shown in (cause.describe(), shown_traceback(long), shown_traceback(text)):
        assert "engine/rank" not in shown and "in users_step" in shown, shown
        assert shown.rstrip().endswith("RuntimeError: boom")
    assert "in test_the_traceback_the_cli" in cause.describe()  # the user's frame above the watch's
    assert len(shown_traceback(long)) <= TRACEBACK_SHOWN and shown_traceback(long).startswith("  File")


class NoReporter:
    def beat(self, where: str | None) -> None:
        return

    def flush(self) -> None:
        return


def test_a_ranks_stacks_shown_hold_the_scripts_threads_not_mgpu_tuis(tmp_path, monkeypatch):
    monkeypatch.setattr(stack_signature, "BEAT_S", 0.05)
    watch = ScriptWatch(NoReporter(), "train.py")
    watch._beats.start()
    dumper = FlightRecorderDump(tmp_path, rank=0)
    folder = RunDir(tmp_path)
    request = folder.request_path(STACKS_REQUEST)
    try:
        request.parent.mkdir(parents=True, exist_ok=True)
        request.write_text("")
        assert wait_until(lambda: folder.stacks_path(0).exists(), timeout=10)
        raw = folder.stacks_path(0).read_text()
    finally:
        dumper.stop()
        watch._beats.stop()
    assert "_watch_stack" in raw and "_loop" in raw  # both threads were in the dump
    shown = readable_stacks(raw)
    assert "engine/rank" not in shown
    main_thread = shown.split("\n\n")[0]  # first: the thread the dump's first line named
    assert "in test_a_ranks_stacks_shown" in main_thread and "in wait_until" in main_thread
