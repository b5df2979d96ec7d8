"""The app's run controller keeps one thread per run, and only that thread touches its run: a
followed run whose thread does not end in time is let go of without a second thread posting for
it, and closing the app never closes a run from another thread. Stand-in runs, no process."""

import threading
from pathlib import Path

from waiting import wait_until

from mgpu_tui.app import run_controller
from mgpu_tui.app.messages import RunEnded, RunUpdated
from mgpu_tui.app.run_controller import RunController


class App:
    """What the controller needs of the Textual app: messages posted, kept here."""

    def __init__(self) -> None:
        self.posted: list = []

    def post_message(self, message) -> None:
        self.posted.append(message)

    def call_from_thread(self, fn, *args, **kwargs) -> None:
        fn(*args, **kwargs)

    def notify(self, *args, **kwargs) -> None:
        pass


class StandInRun:
    """Answers like a run; its poll can be held (a slow disk, a stuck read) until released."""

    def __init__(self, name: str) -> None:
        self.name, self.released, self.finished = name, threading.Event(), False
        self.released.set()
        self.held = threading.Event()  # its thread waits in a held poll now
        self.closed_by: list[str] = []
        self.summary = None
        self.stall = self.stopped_rank = None
        self.run_dir = type("RunDir", (), {"path": Path(name)})()
        self.telemetry = type("Telemetry", (), {"copy": lambda _: None})()

    def poll(self):
        if not self.released.is_set():
            self.held.set()
        self.released.wait()
        return type("State", (), {"finished": self.finished})()

    def stop(self) -> None:
        self.finished = True

    def close(self) -> None:
        self.closed_by.append(threading.current_thread().name)

    def stats(self):
        return self.name  # the message says whose it is

    series = whole_series = lambda self: ([], [], [])
    stall_timeout = lambda self: 30.0  # noqa: E731
    nodes = lambda self: ()  # noqa: E731
    node_machines = lambda self: {}  # noqa: E731
    stalled_ranks = lambda self: None  # noqa: E731
    drain_log_lines = lambda self: ([], 0)  # noqa: E731


def updates_of(app: App, name: str) -> int:
    return sum(1 for m in app.posted if isinstance(m, RunUpdated) and m.stats == name)


def test_a_followed_run_that_does_not_let_go_in_time_never_posts_beside_the_next(monkeypatch):
    monkeypatch.setattr(run_controller, "UNFOLLOW_JOIN_S", 0.2)
    app, first, second = App(), StandInRun("first"), StandInRun("second")
    controller = RunController(app)
    controller._begin(first, owned=False)
    assert wait_until(lambda: updates_of(app, "first") > 0)
    first.released.clear()  # its thread is stuck in a poll
    assert wait_until(first.held.is_set)
    controller.unfollow()  # waits 0.2 s, in vain
    controller._begin(second, owned=False)
    before = updates_of(app, "first")
    first.released.set()  # the stuck thread wakes, beside the second's
    assert wait_until(lambda: first.closed_by) and wait_until(lambda: updates_of(app, "second") > 0)
    assert updates_of(app, "first") == before
    assert not any(isinstance(m, RunEnded) for m in app.posted)  # the first, let go of, ends in silence
    assert first.closed_by == ["mgpu-run"]  # closed by its own thread
    controller.close()


def test_closing_the_app_never_closes_a_run_from_another_thread(monkeypatch):
    monkeypatch.setattr(run_controller, "CLOSE_JOIN_S", 0.2)
    app, run = App(), StandInRun("own")
    controller = RunController(app)
    controller._begin(run, owned=True)
    assert wait_until(lambda: updates_of(app, "own") > 0)
    run.released.clear()  # its thread is stuck in a poll when the app closes
    assert wait_until(run.held.is_set)
    controller.close()
    assert run.closed_by == []  # the app did not touch it
    run.released.set()
    assert wait_until(lambda: run.closed_by)
    assert run.finished and run.closed_by == ["mgpu-run"]  # its thread stopped and closed it
