"""A long run's files under a real launch (issue 64): two ranks of 40,000 steps each, through the
script's own Reporter, fast enough to take seconds. Their events rotate past the head into segments,
the older ones removed; the engine follows them live, its summary counts every step; opened again
from its folder it shows the same run; `runs` lists it."""

import json
import textwrap

from conftest import only_run_dir, read_summary, run_cli
from mgpu_tui.engine.protocol.rundir import RunDir
from mgpu_tui.engine.rank import event_files
from mgpu_tui.engine.records.follow import FollowedRun

STEPS = 40_000
MANY_STEPS = f"""
    import os
    from mgpu_tui import Reporter
    reporter = Reporter()
    rank = int(os.environ["RANK"])
    for step in range(1, {STEPS} + 1):
        peak = (1 << 30) + step
        reporter.step(step, samples=8, loss=1.0 / step + rank, mem_bytes=1 << 30, mem_peak_bytes=peak)
    reporter.done({STEPS})
"""


def test_a_long_runs_files_rotate_and_it_reads_back_whole(tmp_path):
    script = tmp_path / "many_steps.py"
    script.write_text(textwrap.dedent(MANY_STEPS))
    runs = tmp_path / "runs"
    done = run_cli(
        "run", "--script", str(script), "--nproc", "2", "--run-dir", str(runs), "--json", timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    run = only_run_dir(runs)
    summary = read_summary(run / "summary.json")
    assert summary.steps == STEPS and [r.last_step for r in summary.ranks] == [STEPS, STEPS]
    assert all(r.done for r in summary.ranks) and summary.malformed_events == 0
    folder = RunDir(run)
    bound = event_files.HEAD_BYTES + (event_files.KEEP + 1) * event_files.SEGMENT_BYTES
    for rank in (0, 1):
        segments = folder.events_segments(rank)
        assert len(segments) == event_files.KEEP and min(segments) > 1  # the older ones removed
        kept = folder.events_path(rank).stat().st_size + sum(p.stat().st_size for p in segments.values())
        assert kept < bound and folder.events_digest_path(rank).stat().st_size < 200_000
    followed = FollowedRun(run)
    assert followed.poll().finished
    stats = followed.stats()
    assert [r.last_step for r in stats.ranks] == [STEPS, STEPS] and stats.final_loss == summary.final_loss
    assert abs(stats.samples_per_s - summary.samples_per_s) < 1e-9 * summary.samples_per_s
    assert [r.mem_peak_bytes for r in stats.ranks] == [(1 << 30) + STEPS] * 2
    followed.close()
    listed = run_cli("runs", "--run-dir", str(runs), "--json")
    assert listed.returncode == 0 and json.loads(listed.stdout)["runs"][0]["status"] == "ok"
