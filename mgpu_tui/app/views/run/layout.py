"""How the Run view fits its terminal: which of its parts show, and how tall each is, at each size.

Its classes, set from its size as it changes (a run opened in a small terminal is laid out again
when the terminal grows): ``narrow`` (under 120 columns: the form on two rows, the charts under the
ranks), ``short`` (the log's controls on one row; the panel under the charts up to 40%), ``tiny``
(80x24: once a run ended, its charts give their rows to the logs and its panel keeps 5), ``low``
(no telemetry charts); and ``ended``, set by the view when its run ends: the log box as tall as its
lines, the charts the rest (none where the run has no step to chart: ``no-steps``)."""

from __future__ import annotations

from textual.widget import Widget

from mgpu_tui.app.views.run.form import NARROW

LOW = 28  # rows of the view (a terminal of 32) under which no telemetry charts show under the run's own
SHORT = 44  # rows of the view under which it folds for its logs (80x24 gives it 20; 160x50, 46)
TINY = 30  # rows under which the panel under the charts keeps 5 (80x24); a short one keeps 40%


def fit_to_size(view: Widget) -> bool:
    """The view's size classes for its size now; whether it is short (its logs' controls fold)."""
    view.set_class(view.size.width < NARROW, "narrow")
    short = view.size.height < SHORT
    view.set_class(short, "short")
    view.set_class(view.size.height < TINY, "tiny")
    view.set_class(view.size.height < LOW, "low")
    return short


RUN_VIEW_CSS = """    RunView {
        height: 1fr;
    }
    #run-status {
        padding: 0 1;
    }
    #run-middle {
        height: auto;
        max-height: 14;
    }
    #ranks {
        width: auto;
        max-width: 75%;
        padding: 0 1;
        height: auto;
        max-height: 14;
    }
    #charts {
        width: 1fr;
        height: auto;
        padding: 0 1;
    }
    #charts Chart {
        height: 5;
    }
    /* Under 120 columns the charts go under the ranks, side by side, each half the width: beside the
       table they had 20 columns at 80x24, their titles cut. */
    RunView.narrow #run-middle {
        layout: vertical;
    }
    RunView.narrow #ranks {
        width: 1fr;
        max-width: 100%;
        max-height: 8;
    }
    RunView.narrow #charts {
        layout: horizontal;
        height: 5;
    }
    RunView.narrow #charts Chart {
        width: 1fr;
    }
    RunView.narrow #throughput {
        margin-right: 2;
    }
    /* A low terminal: the run's own rows, charts and logs come first. A class, so that a terminal
       made taller shows the charts of a run opened in a low one (they never came back). */
    RunView.low #telemetry {
        display: none;
    }
    #root-cause {
        display: none;
        height: auto;
        max-height: 16;
        border: heavy $error;
        padding: 0 1;
        overflow-y: auto;
    }
    /* Before any failure, the panel carries the run's note (ranks sharing GPUs): a remark, not an alarm. */
    #root-cause.note {
        border: round $warning;
    }
    #root-cause.result {
        border: round $success;
    }
    /* The logs' box is as tall as its lines (log_view.py), and has twice the charts' share of the
       rest: once a run has ended, the charts take the rows a short log leaves (a log of 4 lines had
       25 rows of a 160x45 screen, the charts none). */
    #logs, #guide {
        height: 2fr;
    }
    RunView.ended #run-middle {
        height: 1fr;
        min-height: 10;
        max-height: 24;
    }
    RunView.ended #charts {
        height: 1fr;
    }
    RunView.ended #charts Chart {
        height: 1fr;
    }
    /* An ended run with no step to chart (a hang before its first): its rows go to the logs. */
    RunView.ended.no-steps #charts {
        display: none;
    }
    RunView.ended.no-steps #run-middle {
        height: auto;
        min-height: 0;
    }
    RunView.narrow.ended #run-middle, RunView.narrow.ended #charts {
        height: auto;
        min-height: 0;
    }
    RunView.narrow.ended #charts {
        height: 5;
    }
    /* A short terminal: the log's controls fold to one row. A tiny one (80x24): once the run has
       ended, the charts give their rows to the logs and the result panel keeps its first lines (it
       scrolls): at least 5 log lines stay readable, a failing rank's traceback among them. */
    RunView.short #root-cause {
        max-height: 40%;  /* 160x45: a root cause's 16 rows, the logs 10 or more (it had 5 over 25) */
    }
    RunView.tiny #root-cause {
        max-height: 5;
    }
    RunView.tiny.ended #charts {
        display: none;
    }
"""
