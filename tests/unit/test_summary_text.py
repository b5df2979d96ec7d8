"""What the summary's text and the run listings say in words: one word for a run stopped on request
everywhere a person reads it (issue #31), the one summary.json holds, "interrupted" (issue #57: the
console said "stopped" where the JSON said "interrupted", and "stopped" is also a rank frozen by
SIGSTOP); and why a rank's samples/s is n/a."""

import json

from test_hostile_folder import good_run

from mgpu_tui.cli import main
from mgpu_tui.engine.records.history import read_run
from mgpu_tui.reports.run_summary import summary_text


def test_an_interrupted_run_reads_interrupted_in_text_as_in_json(tmp_path, capsys):
    root = tmp_path / "runs"
    path = good_run(root, "20260101-000000-ddp", status="interrupted", exit_code=130)
    assert main(["runs", "--run-dir", str(root)]) == 0
    row = capsys.readouterr().out.splitlines()[-1]
    assert " interrupted " in row and "stopped" not in row
    assert main(["runs", "--run-dir", str(root), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["runs"][0]["status"] == "interrupted"
    head = summary_text(read_run(path).summary).splitlines()[0]
    assert "status interrupted " in head and "stopped" not in head


def test_a_rank_that_counts_no_samples_by_design_says_why_beside_the_jobs_rate(tmp_path):
    import dataclasses

    path = good_run(tmp_path / "runs", "20260101-000000-tp")
    summary = read_run(path).summary
    peer = dataclasses.replace(summary.ranks[1], samples_per_s=None)
    text = summary_text(dataclasses.replace(summary, ranks=(summary.ranks[0], peer)))
    assert "samples/s n/a for rank(s) 1: they count no samples by design" in text
    assert "count no samples" not in summary_text(summary)  # every rank with its rate: nothing to say


def test_the_listings_name_a_runs_model_where_it_is_not_the_quick_mlp(tmp_path, capsys):
    """Issue #31: the Runs view and `runs` showed 'ddp' for a gpt-tiny run and an MLP run alike."""
    root = tmp_path / "runs"
    good_run(root, "20260101-000000-ddp")  # the MLP
    gpt = good_run(root, "20260101-000001-ddp")
    document = json.loads((gpt / "spec.json").read_text())
    document["spec"]["model"] = "gpt-tiny"
    (gpt / "spec.json").write_text(json.dumps(document))
    assert main(["runs", "--run-dir", str(root)]) == 0
    rows = capsys.readouterr().out.splitlines()[2:]
    assert "ddp · gpt-tiny" in rows[0] and "·" not in rows[1]
    assert main(["runs", "--run-dir", str(root), "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)["runs"]
    assert [(r["what"], r["model"]) for r in listed] == [("ddp", "gpt-tiny"), ("ddp", "mlp")]


def test_old_runs_are_deleted_only_when_asked_and_never_a_live_or_foreign_folder(
    tmp_path, capsys, monkeypatch
):
    """Issue #31: how to clean up runs. `runs --delete-older-than DAYS` asks first (or --yes), and
    leaves what is not a finished run of this folder: a new run, a folder that is not a run, a link
    to a folder elsewhere, the files a run's links point at."""
    import os
    import sys
    import time

    root = tmp_path / "runs"
    outside = tmp_path / "keep.txt"
    outside.write_text("mine")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    def aged(name, days, **changes):
        path = good_run(root, name, **changes)
        document = json.loads((path / "spec.json").read_text())
        document["created_at"] = time.time() - days * 86400
        (path / "spec.json").write_text(json.dumps(document))
        return path

    old_ok = aged("20200101-000000-ddp", 30)
    old_failed = aged("20200101-000001-ddp", 30, status="failed", exit_code=1)
    (old_ok / "link-out").symlink_to(outside)  # a rank's link: removed, never followed
    new = aged("20260101-000000-ddp", 1)
    (root / "notes").mkdir()  # not a run: broken, never deleted
    (root / "notes" / "todo.txt").write_text("x")
    (root / "20200101-000002-link").symlink_to(elsewhere)

    assert main(["runs", "--run-dir", str(root), "--delete-older-than", "7"]) == 2  # no terminal, no --yes
    assert "Nothing was deleted: say yes with --yes" in capsys.readouterr().err
    assert old_ok.exists() and old_failed.exists()

    monkeypatch.setattr(sys.stdin, "isatty", lambda: True)
    answers = iter(["n", "y"])
    monkeypatch.setattr("builtins.input", lambda prompt: next(answers))
    assert main(["runs", "--run-dir", str(root), "--delete-older-than", "7"]) == 0  # asked: no
    assert "nothing deleted" in capsys.readouterr().out and old_ok.exists()
    assert main(["runs", "--run-dir", str(root), "--delete-older-than", "7"]) == 0  # asked: yes
    out = capsys.readouterr().out
    assert old_ok.name in out and old_failed.name in out and "deleted 2 run(s)" in out
    assert not old_ok.exists() and not old_failed.exists()
    assert (
        new.exists()
        and (root / "notes" / "todo.txt").exists()
        and os.path.islink(root / "20200101-000002-link")
    )
    assert outside.read_text() == "mine" and elsewhere.exists()
    assert main(["runs", "--run-dir", str(root), "--delete-older-than", "7", "--yes"]) == 0
    assert "nothing deleted" in capsys.readouterr().out


def _immutable(path, on: bool) -> None:
    """chattr +i / -i on ``path``, by the kernel's own call (root can remove anything else)."""
    import fcntl
    import os
    import struct

    get_flags, set_flags, immutable = 0x80086601, 0x40086602, 0x10  # FS_IOC_GETFLAGS, ..._SETFLAGS
    fd = os.open(path, os.O_RDONLY)
    try:
        flags = struct.unpack("i", fcntl.ioctl(fd, get_flags, struct.pack("i", 0)))[0]
        flags = flags | immutable if on else flags & ~immutable
        fcntl.ioctl(fd, set_flags, struct.pack("i", flags))
    finally:
        os.close(fd)


def test_a_run_that_cannot_be_emptied_is_said_kept_whole_as_a_run_and_the_rest_deleted(tmp_path, capsys):
    """A file that cannot be removed ended cleanup in a traceback, left that run half deleted ("not a
    run") and skipped the others: now each run is deleted or said, its spec.json removed last."""
    import time

    root = tmp_path / "runs"

    def aged(name):
        path = good_run(root, name)
        document = json.loads((path / "spec.json").read_text())
        document["created_at"] = time.time() - 30 * 86400
        (path / "spec.json").write_text(json.dumps(document))
        return path

    stuck, other = aged("20200101-000000-ddp"), aged("20200101-000001-ddp")
    (stuck / "logs").mkdir(exist_ok=True)
    pinned = stuck / "logs" / "pinned.log"
    pinned.write_text("x")
    _immutable(pinned, True)
    try:
        code = main(["runs", "--run-dir", str(root), "--delete-older-than", "7", "--yes"])
        out, err = capsys.readouterr()
        assert code == 1 and "deleted 1 run(s)" in out and not other.exists()
        assert f"{stuck.name} was not deleted (pinned.log: Operation not permitted)" in err
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
        assert (stuck / "spec.json").exists()  # still a run, listed, to delete again
        assert main(["runs", "--run-dir", str(root)]) == 0 and stuck.name in capsys.readouterr().out
    finally:
        _immutable(pinned, False)
    assert main(["runs", "--run-dir", str(root), "--delete-older-than", "7", "--yes"]) == 0
    assert not stuck.exists()


def test_the_progress_line_of_a_large_job_stays_one_short_line_naming_its_outliers():
    """Issue #45: the CLI's progress line printed every rank of a 256-rank run (over 5,000
    characters). Past 8 ranks it names the step range, the slowest and the fastest rank, and the
    silent ones; a 2-rank run's line is as it was."""
    import io
    import time

    from mgpu_tui.commands.run import Progress
    from mgpu_tui.engine.protocol.events import Hello, Step
    from mgpu_tui.engine.run.figures.aggregate import Aggregator

    def stats_of(world: int):
        events, now = Aggregator(), time.time()
        for rank in range(world):
            events.add(Hello(rank, now - 9, rank, world, 4000 + rank, "h", "cpu", None, "ddp"))
            rate = 500.0 if rank == 17 else 1000.0 + rank
            for step in range(1, (90 if rank == 200 else 100) + 1):
                events.add(
                    Step(rank, now - (100 - step) * 0.05, step, 32, 0, 0.5, 32 / rate, 1 << 20, 1 << 20)
                )
        return events.stats()

    progress = Progress(1000, stream=io.StringIO())
    line = progress.line(stats_of(256), {5: 31.0, 9: 12.0, 11: 40.0, 12: 35.0})
    assert "\n" not in line and len(line) < 200, (len(line), line)
    assert "256 ranks at steps 90-100" in line and "slowest r17 " in line and "fastest r255 " in line
    assert "4 silent (r5 31 s, r9 12 s, r11 40 s and 1 more)" in line
    small = progress.line(stats_of(2))
    assert small.endswith("|  r0 100 0.5000  r1 100 0.5000"), small


def test_the_summary_of_a_large_job_prints_a_row_a_node_and_names_its_outliers(tmp_path):
    """Issue #45: the summary printed a row for each of 256 ranks. Past 16 ranks it prints a row a
    node (the ranks' step range, summed samples/s, mean loss, largest peak memory) and names the
    slowest, the fastest and the furthest-behind rank; summary.json keeps every rank."""
    import dataclasses

    from conftest import pinned_summary
    from mgpu_tui.engine.run.summary import RankSummary

    ranks = tuple(
        RankSummary(
            r, 99 if r == 77 else 100, 50.0 if r == 130 else 100.0 + r % 8, 0.5, 1 << 30, "cpu", 1, True
        )
        for r in range(256)
    )
    summary = dataclasses.replace(
        pinned_summary(tmp_path), world_size=256, nnodes=32, ranks=ranks, peak_mem_bytes=(1 << 30,) * 256
    )
    text = summary_text(summary)
    lines = text.splitlines()
    rows = [line for line in lines if line.startswith("node ")]
    assert (
        len(rows) == 32
        and rows[0].startswith("node 0 (ranks 0-7)")
        and rows[31].startswith("node 31 (ranks 248-255)")
    )
    assert rows[9].split()[4] == "99-100"  # node 9 holds rank 77, a step behind
    assert "slowest rank 130 50 samples/s" in text and "fastest rank 7 107 samples/s" in text
    assert "furthest behind rank 77 at step 99" in text and "256 ranks (every one in summary.json)" in text
    assert not any(line.startswith("rank ") for line in lines)
