"""A diverged loss (NaN or infinite) is shown as diverged, never as no loss: the events carry it as
null with ``loss_nonfinite`` (JSON has no NaN), and the summary, the console and the app say where."""

import dataclasses
import math

from conftest import pinned_summary
from mgpu_tui.console import fmt_rank_loss
from mgpu_tui.engine.protocol.events import encode, parse_line
from mgpu_tui.engine.run.figures.aggregate import Aggregator
from mgpu_tui.reports.run_summary import summary_text


def steps(losses):
    aggregator = Aggregator()
    for n, loss in enumerate(losses, 1):
        fields = {"step": n, "samples": 4, "tokens": 0, "loss": loss, "step_s": 0.1}
        line = encode("step", 0, 1000.0 + n, {**fields, "mem_bytes": None, "mem_peak_bytes": None})
        aggregator.add(parse_line(line.encode()))
    return aggregator.stats().ranks[0]


def test_the_first_non_finite_loss_is_where_the_rank_diverged():
    rank = steps([0.9, 0.8, math.nan, math.inf])
    assert rank.loss is None and rank.diverged_at == 3
    assert fmt_rank_loss(rank.loss, rank.diverged_at) == "NaN at step 3"
    fine = steps([0.9, 0.8])
    assert fine.diverged_at is None and fmt_rank_loss(fine.loss, fine.diverged_at) == "0.8000"
    assert fmt_rank_loss(None, None) == "n/a"  # no loss at all: said as before


def test_the_summary_says_nan_where_a_rank_diverged(tmp_path):
    summary = pinned_summary(tmp_path, final_loss=None)
    ranks = tuple(dataclasses.replace(r, loss=None, diverged_at=412) for r in summary.ranks)
    text = summary_text(dataclasses.replace(summary, ranks=ranks))
    assert "NaN at step 412" in text
    assert "n/a" not in text.split("step time")[0].split("\n", 2)[2]  # no rank row, nor "all", says n/a
    written = dataclasses.replace(summary, ranks=ranks).to_json()
    assert written["ranks"][0]["diverged_at"] == 412 and written["ranks"][0]["loss"] is None
    assert "diverged_at" not in summary.to_json()["ranks"][0]  # where nothing diverged: as before
