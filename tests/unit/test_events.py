"""The event protocol: what the reporter writes, the parser reads; anything else is refused."""

import json
import math

import pytest

from mgpu_tui.engine.protocol import events
from mgpu_tui.engine.protocol.events import MalformedEvent, Step, parse_line


def step_line(**over) -> bytes:
    fields = {
        "step": 3,
        "samples": 32,
        "tokens": 0,
        "loss": 1.5,
        "step_s": 0.01,
        "mem_bytes": 10,
        "mem_peak_bytes": 20,
    }
    fields.update(over)
    return events.encode("step", 1, 1000.0, fields).encode()


def test_round_trip_of_every_kind():
    hello = events.encode(
        "hello",
        0,
        1.0,
        {
            "local_rank": 0,
            "world_size": 2,
            "pid": 42,
            "host": "h",
            "device": "cpu",
            "device_uuid": None,
            "mode": "ddp",
            "config": {"steps": 5},
        },
    )
    parsed = parse_line(hello)
    assert parsed.world_size == 2 and parsed.config == {"steps": 5} and parsed.pid == 42
    assert parse_line(step_line()) == Step(1, 1000.0, 3, 32, 0, 1.5, 0.01, 10, 20)
    done = parse_line(events.encode("done", 0, 2.0, {"steps": 5, "note": "x"}))
    assert done.steps == 5 and done.extra == {"note": "x"}
    error = parse_line(events.encode("error", 1, 3.0, {"message": "boom", "traceback": "tb"}))
    assert (error.rank, error.message, error.traceback) == (1, "boom", "tb")


def test_line_with_its_newline_and_unknown_fields_parses():
    line = json.loads(step_line())
    line["future_field"] = {"a": 1}
    assert parse_line(json.dumps(line) + "\n").step == 3


def test_nonfinite_loss_is_written_as_null_with_a_flag():
    line = events.encode("step", 0, 1.0, {"step": 1, "samples": 1, "loss": math.nan, "step_s": 0.1})
    record = json.loads(line)
    assert record["loss"] is None and record["loss_nonfinite"] is True
    assert parse_line(line).loss is None


@pytest.mark.parametrize(
    "line",
    [
        b"",
        b"{",  # a partial line
        b'{"v": 1, "kind": "step", "rank": 0, "t": 1.0, "step": 1',
        b"garbage that is not json",
        b"\xff\xfe\x00\x01binary",
        b"[1, 2, 3]",
        b'{"v": 2, "kind": "step", "rank": 0, "t": 1, "step": 1, "samples": 1, "step_s": 0.1}',
        b'{"v": 1, "kind": "nope", "rank": 0, "t": 1}',
        b'{"v": 1, "kind": "step", "rank": -1, "t": 1, "step": 1, "samples": 1, "step_s": 0.1}',
        b'{"v": 1, "kind": "step", "rank": 0, "t": 1, "step": true, "samples": 1, "step_s": 0.1}',
        b'{"v": 1, "kind": "step", "rank": 0, "t": 1, "step": 1, "samples": "8", "step_s": 0.1}',
        b'{"v": 1, "kind": "hello", "rank": 0, "t": 1}',
        b'{"v": true, "kind": "done", "rank": 0, "t": 1, "steps": 1}',
    ],
)
def test_malformed_lines_are_refused(line):
    with pytest.raises(MalformedEvent):
        parse_line(line)


def test_huge_line_is_refused_without_parsing():
    huge = b'{"v": 1, "pad": "' + b"x" * events.MAX_LINE_BYTES + b'"}'
    with pytest.raises(MalformedEvent, match="too long"):
        parse_line(huge)
