"""Issue 41: every moment between two steps is told to exactly one part, the innermost phase open."""

import threading

import pytest

from mgpu_tui.engine.protocol.events import STEP_PARTS, MalformedEvent, parse_line
from mgpu_tui.engine.rank.watch.step_clock import StepClock


class Ticks:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_lightning_step_counts_the_forward_and_backward_inside_the_optimizer_once():
    t = Ticks()
    clock = StepClock(t)
    t.now = 1.0  # host: 1 s
    clock.enter("data")
    t.now = 1.5
    clock.leave("data")
    clock.enter("optimizer")  # optimizer.step(closure): the closure runs the forward and backward
    t.now = 1.6
    clock.enter("forward")
    t.now = 2.6
    clock.leave("forward")
    t.now = 2.7  # the loss, outside the model: the optimizer's call still (its closure)
    clock.enter("backward")
    t.now = 4.0
    clock.graph_done()  # the graph ran; DDP's buckets still being all-reduced
    t.now = 4.5
    clock.leave("backward")
    t.now = 4.8
    clock.leave("optimizer")
    t.now = 5.0
    parts = clock.cut()
    assert parts == pytest.approx(
        {"data": 0.5, "forward": 1.0, "backward": 1.3, "comm": 0.5, "optimizer": 0.5, "host": 1.2}
    )
    assert sum(parts.values()) == pytest.approx(5.0)  # the parts add up to the step
    assert list(parts) == list(STEP_PARTS)


def test_a_phase_open_at_the_cut_goes_on_into_the_next_step_and_an_unmatched_leave_is_ignored():
    t = Ticks()
    clock = StepClock(t)
    clock.enter("optimizer")
    t.now = 2.0
    first = clock.cut()
    clock.leave("forward")  # never entered (an evaluation's forward): nothing changes
    t.now = 3.0
    clock.leave("optimizer")
    assert first["optimizer"] == 2.0 and clock.cut()["optimizer"] == 1.0


def test_a_backward_without_a_marked_graph_end_is_all_backward_and_an_exception_unwinds():
    t = Ticks()
    clock = StepClock(t)
    clock.enter("backward")
    t.now = 1.0
    clock.leave("backward")
    clock.enter("optimizer")
    clock.enter("forward")  # an exception left the forward without its end
    t.now = 2.0
    clock.leave("optimizer")  # both end
    t.now = 2.5
    assert clock.cut() == pytest.approx(
        {"data": 0, "forward": 1.0, "backward": 1.0, "comm": 0, "optimizer": 0, "host": 0.5}
    )


def test_another_thread_does_not_move_the_clock():
    t = Ticks()
    clock = StepClock(t)
    worker = threading.Thread(target=clock.enter, args=("data",))
    worker.start()
    worker.join()
    t.now = 1.0
    assert clock.cut()["host"] == 1.0


def _step_line(parts: object) -> bytes:
    import json

    record = {"v": 1, "kind": "step", "rank": 0, "t": 1.0, "step": 2, "samples": 4, "loss": 0.5}
    record.update(step_s=1.0, mem_bytes=None, mem_peak_bytes=None, parts=parts)
    return json.dumps(record).encode()


def test_a_steps_parts_are_read_in_order_and_bad_ones_refused():
    parts = dict(zip(STEP_PARTS, (0.1, 0.2, 0.3, 0.0, 0.05, 0.35)))
    assert parse_line(_step_line({**parts, "later": 1})).parts == (0.1, 0.2, 0.3, 0.0, 0.05, 0.35)
    assert parse_line(_step_line(None)).parts is None
    for bad in ([1, 2], {**parts, "data": -1}, {**parts, "comm": "1"}, {"data": 1.0}):
        with pytest.raises(MalformedEvent):
            parse_line(_step_line(bad))
