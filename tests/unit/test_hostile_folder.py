"""Nothing on disk is trusted: a rank can write every file of its run folder (issue #28).

A good run folder is written here as the engine writes one (its spec.json and summary.json from
the real dataclasses); then each file is made hostile: not JSON, NaN, nested a million deep,
numbers no figure means, wrong types, a FIFO, a link to /dev/zero or to another file, a folder,
gigabytes (sparse). Every reader and every command that reads the folder must give a named,
bounded result: no traceback, no hang, no ESC or C1 byte on the terminal, strict JSON out.
The fuzz is seeded: a failure names its seed and case.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import time
from pathlib import Path

import pytest

from conftest import pinned_summary as summary
from mgpu_tui.cli import main
from mgpu_tui.engine.protocol.causes import RootCause
from mgpu_tui.engine.protocol.folder import Unreadable, loads, read_json, write_atomic
from mgpu_tui.engine.protocol.rundir import RunDir
from mgpu_tui.engine.protocol.rundir_make import folder_name
from mgpu_tui.engine.protocol.text import plain
from mgpu_tui.engine.protocol.typed import Invalid
from mgpu_tui.engine.records.history import list_runs, read_run
from mgpu_tui.engine.run.causes.launcher_report import read_error_file
from mgpu_tui.engine.run.causes.rank_requests import request_flight_records
from mgpu_tui.engine.run.figures.stragglers import Straggler
from mgpu_tui.engine.run.nccl.flight_records import hang_verdict, late_arrivals, read_trace
from mgpu_tui.engine.run.summary import RunSummary

ESC_OR_C1 = [chr(c) for c in (0x1B, *range(0x80, 0xA0))]
EVIL = "\x1b]0;owned\x07\x1b[2J\x9b31m\u202eevil\u200b[bold]x[/bold]"


def good_run(root: Path, name: str, **changes) -> Path:
    path = root / name
    path.mkdir(parents=True)
    spec = {"mode": "ddp", "world_size": 2, "nproc": 2, "steps": 10, "batch_size": 64, "amp": False}
    document = {"spec": {**spec, "device": "cpu", "model": "mlp", "width": 64, "depth": 2}}
    document |= {"created_at": time.time(), "machine": {"hostname": "h", "cpu_count": 2, "gpu_count": 0}}
    (path / "spec.json").write_text(json.dumps(document))
    (path / "summary.json").write_text(json.dumps(summary(path, **changes).to_json()))
    (path / "events").mkdir()
    return path


# ---- the file as the rank leaves it -------------------------------------------------------


def deep(n: int) -> str:
    return "[" * n + "]" * n


def hostile_texts(good: dict, rng: random.Random) -> list[tuple[str, str]]:
    """(what, the file's text): junk, then the good document with one field made wrong."""
    cases = [
        ("empty", ""),
        ("not JSON", "{nope"),
        ("NaN", '{"a": NaN}'),
        ("a number out of range", '{"a": 1e400}'),
        ("an integer of 400 digits", '{"a": ' + "9" * 400 + "}"),
        ("nested a million deep", deep(1_000_000)),
        ("nested 100 deep", deep(100)),
        ("a list", "[1, 2]"),
        ("bytes", bytes(rng.randrange(256) for _ in range(300)).decode("latin-1")),
    ]
    junk = [None, True, -1, 10**18, 1.5e300, "x" * 70_000, EVIL, [], {}, [[[]]], {"a": {"b": 1}}]
    for key in good:
        for value in rng.sample(junk, 4):
            cases.append((f"{key} = {str(value)[:20]!r}", json.dumps({**good, key: value})))
    return cases


def make_special(path: Path, kind: str, other: Path) -> None:
    path.unlink(missing_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "link to /dev/zero":
        path.symlink_to("/dev/zero")
    elif kind == "link to another file":
        path.symlink_to(other)
    elif kind == "folder":
        path.mkdir()
    elif kind == "sparse 4 GiB":
        with open(path, "wb") as f:
            f.truncate(4 << 30)


SPECIALS = ("fifo", "link to /dev/zero", "link to another file", "folder", "sparse 4 GiB")


def clear(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        path.rmdir()
    else:
        path.unlink(missing_ok=True)


@pytest.mark.parametrize("seed", range(3))
def test_fuzz_every_file_kind_read_back_is_a_named_bounded_result(tmp_path, seed):
    rng = random.Random(seed)
    root = tmp_path / "runs"
    path = good_run(root, "run")
    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps({"spec": {"world_size": 1, "mode": "stolen"}, "created_at": 1.0}))
    good = {
        "spec.json": json.loads((path / "spec.json").read_text()),
        "summary.json": json.loads((path / "summary.json").read_text()),
    }
    for name, document in good.items():
        file = path / name
        kept = file.read_text()
        cases = hostile_texts(document, rng)
        for what, text in cases:
            clear(file)
            file.write_text(text)
            started = time.monotonic()
            record = read_run(path)  # never raises
            assert time.monotonic() - started < 2, (seed, name, what)
            if record.status == "broken":
                assert record.reason and name in record.reason, (seed, name, what, record.reason)
        for kind in SPECIALS:
            clear(file)
            make_special(file, kind, secret)
            record = read_run(path)
            assert record.status == "broken" and record.what != "stolen", (name, kind, record)
            assert name in (record.reason or ""), (name, kind, record.reason)
        clear(file)
        file.write_text(kept)
    assert read_run(path).status == "ok"


def test_a_flight_record_is_read_as_untrusted_whatever_it_holds(tmp_path):
    fr = tmp_path / "fr"
    fr.mkdir()
    file = fr / "rank0.json"
    good_entry = {"collective_seq_id": 3, "profiling_name": "gloo:all_reduce", "time_created_ns": 5}
    for text in (
        '{"entries": 5}',
        '{"entries": "abc"}',
        deep(1_000_000),
        '{"entries": [{"collective_seq_id": 1, "time_created_ns": ' + "1" + "0" * 400 + "}]}",
        '{"entries": [{"collective_seq_id": 1, "input_sizes": 7, "input_dtypes": [1]}]}',
        '{"entries": [{"collective_seq_id": 1, "input_sizes": [[1e300]], "input_dtypes": ["Float"]}]}',
        json.dumps({"entries": [good_entry, {**good_entry, "time_created_ns": 1e300}]}),
    ):
        clear(file)
        file.write_text(text)
        traces = {0: read_trace(file, tmp_path), 1: read_trace(file, tmp_path)}
        hang_verdict(traces, {}, time.time_ns())  # never raises
        late_arrivals(traces)
    for kind in SPECIALS:
        clear(file)
        make_special(file, kind, tmp_path / "elsewhere.json")
        assert read_trace(file, tmp_path) == []  # not read, not blocked on


def test_a_torchrun_error_file_nested_deep_or_odd_is_none(tmp_path):
    file = tmp_path / "error.json"
    for text in (deep(1_000_000), '{"message": {"extraInfo": {"timestamp": 1e300}}}', '{"message": 5}'):
        file.write_text(text)
        result = read_error_file(file)
        assert result is None or result[2] is None
    clear(file)
    os.mkfifo(file)
    assert read_error_file(file) is None


def test_the_engines_writes_never_go_through_a_link_or_block_on_a_fifo(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    run = tmp_path / "run"
    (run / "requests").mkdir(parents=True)
    # requests/fr as a link to the victim, then as a FIFO, then as a folder
    (run / "requests" / "fr").symlink_to(victim)
    assert request_flight_records(run) is not None
    assert victim.read_text() == "keep me" and not (run / "requests" / "fr").is_symlink()
    clear(run / "requests" / "fr")
    os.mkfifo(run / "requests" / "fr")
    started = time.monotonic()
    assert request_flight_records(run) is not None and time.monotonic() - started < 1
    clear(run / "requests" / "fr")
    (run / "requests" / "fr").mkdir()
    assert request_flight_records(run) is None  # cannot be asked: said, not raised
    # requests itself a link to a folder elsewhere: nothing is written there
    (run / "requests" / "fr").rmdir()
    (run / "requests").rmdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (run / "requests").symlink_to(elsewhere)
    assert request_flight_records(run) is None and list(elsewhere.iterdir()) == []
    # the summary's temporary file planted, as a link and as a FIFO, under every name it may take
    run_dir = RunDir(run)
    for plant in ("summary.json.tmp", f".summary.json.{os.getpid()}.tmp"):
        (run / plant).symlink_to(victim)
        run_dir.write_json(run_dir.summary_path, {"status": "ok"})
        assert (
            victim.read_text() == "keep me" and json.loads(run_dir.summary_path.read_text())["status"] == "ok"
        )
        clear(run / plant)
        os.mkfifo(run / plant)
        run_dir.write_json(run_dir.summary_path, {"status": "ok", "n": float("nan")})
        assert json.loads(run_dir.summary_path.read_text(), parse_constant=pytest.fail)["n"] is None
        clear(run / plant)


def test_the_log_folders_ranks_write_are_walked_with_bounds(tmp_path):
    run_dir = RunDir(tmp_path)
    attempt = tmp_path / "logs" / "x" / "attempt_0"
    for name in ("0", "1", "\u00b2", "\u0663", "99999999", "-1"):
        (attempt / name).mkdir(parents=True)
    (tmp_path / "logs" / "x" / "attempt_\u00b2").mkdir()
    (tmp_path / "logs" / "x" / "attempt_7").write_text("a file")
    (tmp_path / "logs" / "y").write_text("a file where a launch folder goes")
    (tmp_path / "logs" / "x" / "attempt_3").symlink_to(attempt)
    for n in range(2, 1000):
        (attempt / str(n)).mkdir()
    assert sorted(run_dir.rank_files(2)) == [0, 1]
    assert len(run_dir.rank_files()) == 1000  # unbounded by a world, still only real rank folders


def test_the_one_sink_shows_every_control_bidi_and_invisible_character():
    shown = plain(EVIL + "\x7f\u2028\u2066\ufeff\n\tend")
    assert not any(c in shown for c in ESC_OR_C1)
    for invisible in ("\u202e", "\u200b", "\u2028", "\u2066", "\ufeff", "\x7f", "\x07"):
        assert invisible not in shown
    assert "<U+202E>evil<U+200B>" in shown and "\\x9b" in shown and shown.endswith("\n\tend")
    assert "[bold]" in shown  # markup is text, shown as written


def test_strict_json_only_is_accepted_and_written():
    for text in ('{"a": NaN}', '{"a": Infinity}', '{"a": -1e999}', deep(65)):
        with pytest.raises(ValueError):
            loads(text)
    assert loads(deep(64)) is not None


def _hostile_root(tmp_path: Path) -> Path:
    root = tmp_path / "runs"
    good_run(root, "20260101-000000-ddp")
    good_run(
        root,
        "20260101-000001-ddp",
        status="failed",
        root_cause=RootCause(1, 1, None, EVIL, EVIL, hint=EVIL, host=EVIL),
        note=EVIL,
        stragglers=(Straggler(1, 0.5, 3, 4, counted=EVIL),),
        final_loss=float("nan"),
    )
    odd = good_run(root, "20260101-000002-odd")
    document = json.loads((odd / "spec.json").read_text())
    document["spec"] |= {"script": EVIL + ".py", "world_size": 1 << 40}
    (odd / "spec.json").write_text(json.dumps(document))
    fifo = good_run(root, "20260101-000003-fifo")
    clear(fifo / "summary.json")
    os.mkfifo(fifo / "summary.json")
    (root / "20260101-000004-link").symlink_to("/etc")
    for n in range(5):
        (root / f"junk{n}{EVIL[:3]}").mkdir()
    return root


def _no_escape(text: str) -> None:
    assert not any(c in text for c in ESC_OR_C1), [c for c in ESC_OR_C1 if c in text]


def test_runs_lists_a_hostile_folder_as_plain_text_and_strict_json(tmp_path, capsys):
    root = _hostile_root(tmp_path)
    assert main(["runs", "--run-dir", str(root)]) == 0
    out = capsys.readouterr()
    _no_escape(out.out + out.err)
    assert "broken" in out.out and "summary.json: not a regular file (a FIFO)" in out.out
    assert main(["runs", "--json", "--run-dir", str(root)]) == 0
    listed = json.loads(capsys.readouterr().out, parse_constant=pytest.fail)
    failed = next(r for r in listed["runs"] if r["path"].endswith("000001-ddp"))
    assert failed["final_loss"] is None and failed["status"] == "failed"
    odd = next(r for r in listed["runs"] if r["path"].endswith("000002-odd"))
    assert odd["status"] == "broken" and "world_size" in odd["reason"]
    assert len(list_runs(root)) == 9


def test_compare_runs_of_a_hostile_folder_is_plain_text_or_one_sentence(tmp_path, capsys):
    root = _hostile_root(tmp_path)
    runs = sorted(str(p) for p in root.iterdir() if p.name.startswith("2026"))
    assert main(["compare", "--runs", runs[0], runs[1]]) in (0, 1)
    out = capsys.readouterr()
    _no_escape(out.out + out.err)
    for other in runs[2:]:
        assert main(["compare", "--runs", runs[0], other]) == 2, other
        err = capsys.readouterr().err
        _no_escape(err)
        assert err.count("\n") == 1 and err.startswith("mgpu-tui: "), err


def test_open_refuses_a_broken_run_in_one_sentence(tmp_path, capsys):
    root = _hostile_root(tmp_path)
    for name in ("20260101-000002-odd", "20260101-000003-fifo"):
        assert main(["open", str(root / name)]) == 2
        err = capsys.readouterr().err
        _no_escape(err)
        assert (
            err.count("\n") == 1
            and "cannot be opened: " in err
            and ("spec.json" in err or "summary.json" in err)
        ), err


def test_a_huge_file_is_refused_by_its_bound_not_read(tmp_path):
    file = tmp_path / "spec.json"
    with open(file, "wb") as f:
        f.truncate(1 << 30)
    started = time.monotonic()
    with pytest.raises(Unreadable, match="over"):
        read_json(file, 1 << 20, root=tmp_path)
    assert time.monotonic() - started < 1
    write_atomic(tmp_path / "ok.json", "{}", root=tmp_path)
    assert read_json(tmp_path / "ok.json", 10, root=tmp_path) == {}


def test_a_job_id_names_one_folder_inside_the_run_root_never_a_path(tmp_path):
    """torchrun's --rdzv-id is anyone's text (the drop-in passes it on): the nodes' shared folder
    stays inside --run-dir, and two ids that differ never share one."""
    root = tmp_path / "runs"
    made = [
        RunDir.create(root, "ddp", shared=job, node=0).path
        for job in ("../../etc", "..", "a/b", "a_b", "x" * 300)
    ]
    assert all(path.parent == root for path in made), made
    assert len(set(made)) == len(made)
    assert folder_name("slurm-1234.0") == "slurm-1234.0"  # a name is kept as it is
    assert not (tmp_path / "etc-ddp").exists()


def test_compare_runs_never_reads_an_event_file_that_is_a_fifo_or_a_link_to_dev_zero(tmp_path, capsys):
    root = tmp_path / "runs"
    a, b = good_run(root, "20260101-000000-ddp"), good_run(root, "20260101-000001-ddp")
    os.mkfifo(a / "events" / "rank0.jsonl")  # no one writes it: a read would wait for ever
    (b / "events" / "rank1.jsonl").symlink_to("/dev/zero")  # endless, and no line ever ends
    (b / "events" / "rank7.jsonl").write_text("")  # no rank of the job
    started = time.monotonic()
    assert main(["compare", "--runs", str(a), str(b)]) in (0, 1)
    assert time.monotonic() - started < 5
    _no_escape(capsys.readouterr().out)


def test_a_spec_claiming_thousands_of_nodes_is_read_in_one_listing(tmp_path):
    """A hostile spec.json of 4,096 nodes (one look-up a node took 18 s a poll at 65,536; more
    nodes than that are refused as a broken run)."""
    from mgpu_tui.engine.records.follow import FollowedRun

    path = good_run(tmp_path / "runs", "20260101-000000-ddp")
    (path / "summary.json").unlink()
    document = json.loads((path / "spec.json").read_text())
    document["spec"] |= {"world_size": 4096, "nnodes": 4096, "nproc": 1}
    (path / "spec.json").write_text(json.dumps(document))
    run = FollowedRun(path)
    started = time.monotonic()
    assert len(run.nodes()) == 4096 and time.monotonic() - started < 1
    run.close()
    document["spec"] |= {"world_size": 65536, "nnodes": 65536}
    (path / "spec.json").write_text(json.dumps(document))
    assert read_run(path).status == "broken" and "nnodes" in read_run(path).reason


def test_a_summarys_nodes_and_nccl_are_typed_and_their_json_is_as_before(tmp_path):
    from mgpu_tui.engine.nodes.view import NodeView
    from mgpu_tui.engine.run.nccl.nccl_record import NcclFigures

    node = NodeView(1, "b", 2, 3, "lost", 7, 12.34, False, ((2, 7), (3, 6)))
    nccl = NcclFigures("4 ranks on 2 hosts", ("2.21.5",), ("NET/Socket",), 2, (), ("ncclInternalError",), 4)
    written = summary(tmp_path, nodes=(node,), nccl=nccl).to_json()
    # The JSON the earlier releases wrote: the node's ranks as text, its steps by rank, rounded silence.
    assert written["nodes"] == [
        {
            "node": 1,
            "host": "b",
            "ranks": "2-3",
            "first_rank": 2,
            "last_rank": 3,
            "state": "lost",
            "step": 7,
            "silent_s": 12.3,
            "here": False,
            "steps": {"2": 7, "3": 6},
        }
    ]
    assert written["nccl"] == {
        "summary": "4 ranks on 2 hosts",
        "versions": ["2.21.5"],
        "transports": ["NET/Socket"],
        "ring_channels": 2,
        "warnings": [],
        "errors": ["ncclInternalError"],
        "files": 4,
    }
    read = RunSummary.from_json(json.loads(json.dumps(written)))
    assert read.nodes == (dataclasses.replace(node, silent_s=12.3),) and read.nccl == nccl
    # A rank can write the summary: a node's fields are checked as they are read, a host cut short.
    hostile = {**written, "nodes": [{**written["nodes"][0], "host": "h" * 10_000}]}
    assert RunSummary.from_json(hostile).nodes[0].host == "h" * 64
    for bad in ({"step": "x"}, {"steps": {"2": 1e400}}, {"node": True}, {"silent_s": "soon"}):
        with pytest.raises(Invalid, match="nodes"):
            RunSummary.from_json({**written, "nodes": [{**written["nodes"][0], **bad}]})


def test_a_programs_path_and_arguments_reach_the_run_forms_list_as_plain_text():
    """The mode list's entry for a script or a command is built from its spec (a spec.json a live
    rank can rewrite): OSC and CSI sequences retitled and cleared the terminal through it."""
    from mgpu_tui.app.views.run.form import one_row, program_label
    from mgpu_tui.engine.launch.spec import LaunchSpec

    hostile = "\x1b]0;owned\x07\x1b[2J\x9b31m\u202etrain.py"
    for spec in (
        LaunchSpec(mode="script", script=hostile, demo_args=("--x", hostile)),
        LaunchSpec(mode="exec", command=("python", hostile, "\n", hostile)),
    ):
        text = one_row(program_label(spec)).plain
        _no_escape(text)
        assert "\n" not in text and "\u202e" not in text
