"""The level-3 check tables (reports/check.py: details) from the figures a rank's task wrote: read
as typed points where they are read, and a figure that is not one is said, never a traceback."""

from mgpu_tui.engine.checks.results import CheckReport, CheckResult, Status
from mgpu_tui.reports.check import details

SWEEP = {
    "size_bytes": 1024,
    "count": 256,
    "type": "float32",
    "time_us": 12.5,
    "algbw_GBps": 0.08,
    "busbw_GBps": 0.08,
    "iterations": 100,  # a key the table does not use
}
SCALING = [
    {"nproc": 1, "samples_per_s": 1000.0, "speedup": 1.0, "efficiency": 1.0},
    {"nproc": 2, "samples_per_s": 1800.0, "speedup": 1.8, "efficiency": 0.9},
]


def report(*results: CheckResult) -> CheckReport:
    return CheckReport(level=3, nproc=2, device="cpu", results=list(results))


def test_the_sweep_scaling_and_copy_tables_read_their_typed_figures():
    text = details(
        report(
            CheckResult("sweep:all_reduce", Status.PASS, "1 size", {"points": [SWEEP]}),
            CheckResult("scaling:ddp", Status.PASS, "ddp, global batch 64: 2 ranks", {"points": SCALING}),
            CheckResult("copy_matrix", Status.PASS, "2 GPUs", {"matrix_GBps": [[None, 20.0], [19.5, None]]}),
        )
    )
    assert "1024" in text and "12.5" in text and "0.08" in text
    assert "1.80x" in text and "90%" in text
    assert "19.5" in text and "X" in text  # no path between a GPU and itself


def test_a_rank_writing_figures_of_the_wrong_kind_gets_a_sentence_not_a_traceback():
    bad = dict(SWEEP, time_us="soon")
    text = details(
        report(
            CheckResult("sweep:all_reduce", Status.PASS, "1 size", {"points": [bad]}),
            CheckResult("scaling:ddp", Status.PASS, "ddp: x", {"points": "many"}),
            CheckResult("copy_matrix", Status.PASS, "2 GPUs", {"matrix_GBps": [[1e400]]}),
        )
    )
    lines = text.split("\n\n")
    assert len(lines) == 3 and all("its figures cannot be shown" in line for line in lines), text
    assert "time_us" in lines[0] and "points" in lines[1]
