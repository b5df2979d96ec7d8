"""Summaries recorded from real runs (tests/fixtures/summaries, each with its command): read into
the typed summary (states as enums, nodes, memory and the root cause as frozen types) and written
back, every recorded key reads back with the same value, in the same order (issue #30: typed
results all the way to the JSON, which stays as it was). A field added since a recording is
written with its default, so a new field needs no fixture edited (issue #44)."""

import json
from pathlib import Path

import pytest

from mgpu_tui.engine.protocol.heartbeat import NodeState
from mgpu_tui.engine.run.summary import RunStatus, RunSummary

RECORDED = sorted((Path(__file__).parents[1] / "fixtures" / "summaries").glob("*.json"))


@pytest.mark.parametrize("path", RECORDED, ids=lambda p: p.stem)
def test_a_recorded_summary_reads_typed_and_writes_back_the_same(path):
    document = json.loads(path.read_text())
    summary = RunSummary.from_json(document)
    assert isinstance(summary.status, RunStatus)
    assert all(isinstance(node.state, NodeState) for node in summary.nodes)
    written = summary.to_json()
    recorded = {key: value for key, value in written.items() if key in document}  # in written's order
    assert recorded == document
    assert json.dumps(recorded) == json.dumps(document)  # the same text: key order, enums by value
    newer = {key: written[key] for key in written.keys() - document.keys()}
    assert all(value in (None, [], {}, ()) for value in newer.values()), newer  # their defaults


def test_the_recordings_hold_each_kind_of_result():
    summaries = [RunSummary.from_json(json.loads(p.read_text())) for p in RECORDED]
    assert {s.status for s in summaries} == {RunStatus.OK, RunStatus.FAILED}
    assert any(s.nodes for s in summaries) and any(s.memory for s in summaries)
    assert any(s.root_cause for s in summaries) and any(s.program for s in summaries)
