"""How a rank's exception is told (engine/rank/bootstrap.py's describe): whatever the exception
object does. One whose __str__ raises crashed the report, and the bootstrap's own error became the
root cause."""

from mgpu_tui.engine.rank.bootstrap import describe


class Hostile(Exception):
    def __str__(self):
        raise RuntimeError("no message for you")


def test_an_exception_whose_message_cannot_be_read_is_still_told_by_its_type():
    try:
        raise Hostile()
    except Hostile as exc:
        told = describe(exc)
    assert told["type"].endswith("Hostile") and told["message"].startswith("Hostile: <its message")
    assert "Traceback" in told["traceback"] and "raise Hostile()" in told["traceback"]


def test_an_ordinary_exception_is_told_whole():
    try:
        raise ValueError("first line\nsecond line")
    except ValueError as exc:
        told = describe(exc)
    assert told["message"] == "ValueError: first line" and told["whole_message"] == "first line\nsecond line"
