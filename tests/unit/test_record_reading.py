"""Reading a run back: its telemetry file parsed as the untrusted thing it is, and fitted to a chart."""

import math

import pytest

from mgpu_tui.app.widgets.bars import fit
from mgpu_tui.app.widgets.chart import chart_title
from mgpu_tui.engine.records.history import RecordError
from mgpu_tui.engine.records.telemetry_read import MAX_TELEMETRY_POINTS, TelemetrySeries


def sample(t, cpu=50.0, gpus=()):
    return {"t": t, "host": {"cpu": cpu, "mem_used": 1000}, "gpus": list(gpus), "ranks": []}


def test_telemetry_lines_become_series_with_none_where_a_field_is_missing_or_not_a_number():
    series = TelemetrySeries()
    series.add(sample(1.0, gpus=[{"i": 0, "mem_used": 5, "util": 90, "power_w": 300.5}]))
    series.add(sample(2.0, cpu=math.nan, gpus=[{"i": 0, "mem_used": "lots", "util": True, "power_w": None}]))
    series.add(sample(3.0, cpu=math.inf))  # GPU 0 missing from this sample
    series.add({"t": "yesterday", "host": {"cpu": 1}})  # no time: not a sample
    series.add({"t": 4.0, "host": "x", "gpus": [7, {"i": 10**9}, {"i": -1}]})  # junk, and GPUs of no sense
    series.add({"t": 5.0, "end": "recording stopped at 33554432 bytes"})
    assert series.t == [1.0, 2.0, 3.0, 4.0]
    assert series.host_cpu == [50.0, None, None, None]
    assert list(series.gpus) == [0]
    assert series.gpus[0] == {
        "mem": [5.0, None, None, None],
        "util": [90.0, None, None, None],
        "power": [300.5, None, None, None],
    }
    assert series.ended == "recording stopped at 33554432 bytes"


def test_a_gpu_that_appears_late_is_aligned_with_the_samples_before_it():
    series = TelemetrySeries()
    series.add(sample(1.0))
    series.add(sample(2.0, gpus=[{"i": 1, "util": 40}]))
    assert series.gpus[1]["util"] == [None, 40.0]


def test_a_very_long_record_is_halved_and_still_covers_the_whole_run():
    series = TelemetrySeries()
    for t in range(MAX_TELEMETRY_POINTS + 1):
        series.add(sample(float(t), cpu=float(t % 100)))
    assert len(series.t) == len(series.host_cpu) == (MAX_TELEMETRY_POINTS + 2) // 2
    assert series.t[0] == 0.0 and series.t[-1] >= MAX_TELEMETRY_POINTS - 1


def test_fit_gives_one_mean_per_column_over_the_whole_series():
    assert fit([1, 2, 3], 5) == [1, 2, 3]
    assert fit(list(range(10)), 5) == [0.5, 2.5, 4.5, 6.5, 8.5]
    assert len(fit(list(range(1001)), 80)) == 80 and fit(list(range(1001)), 80)[-1] > 990


def test_a_chart_title_drops_the_range_then_the_latest_value_to_stay_on_one_row():
    values = [1.0, 5.0, 3.0]
    full = chart_title("loss", values, str).plain
    assert full == "loss, last 3 steps · now 3.0 · range 1.0 to 5.0"
    assert chart_title("loss", values, str, width=len(full)).plain == full
    assert chart_title("loss", values, str, width=len(full) - 1).plain == "loss, last 3 steps · now 3.0"
    assert chart_title("loss", values, str, width=20).plain == "loss, last 3 steps"
    assert chart_title("CPU", values, str, span="whole run").plain.startswith("CPU, whole run · now")


def test_a_reopened_run_gives_the_form_its_own_model_and_settings(tmp_path):
    """Issue #31: an opened --model gpt-tiny run filled the form with mlp, so Start ran another job."""
    import json

    from test_hostile_folder import good_run

    from mgpu_tui.engine.records.follow import FollowedRun

    path = good_run(tmp_path / "runs", "20260101-000000-ddp")
    document = json.loads((path / "spec.json").read_text())
    document["spec"] |= {"model": "gpt-tiny", "model_args": [["layers", 3]], "amp": True, "steps": 60}
    (path / "spec.json").write_text(json.dumps(document))
    run = FollowedRun(path)
    spec, nproc = run.launch_spec()
    assert (spec.mode, spec.model, spec.model_args, spec.amp, spec.steps, spec.batch_size, nproc) == (
        "ddp",
        "gpt-tiny",
        (("layers", 3),),
        True,
        60,
        64,
        2,
    )
    run.close()


def test_a_reopened_script_run_gives_its_program_arguments_and_stall_settings(tmp_path):
    """Issue #31: a script run reopened as ddp with 1000 steps, so Start ran a demo, not the script."""
    import json

    from test_hostile_folder import good_run

    from mgpu_tui.engine.records.follow import FollowedRun

    path = good_run(tmp_path / "runs", "20260101-000000-script")
    document = json.loads((path / "spec.json").read_text())
    document["spec"] |= {
        "mode": "script",
        "script": "train.py",
        "demo_args": ["--max-iters", "10"],
        "instrument": False,
        "stall_timeout": 12.5,
        "on_stall": "stop",
        "device_requested": "auto",
    }
    (path / "spec.json").write_text(json.dumps(document))
    run = FollowedRun(path)
    spec, nproc = run.launch_spec()
    said = (spec.mode, spec.script, spec.demo_args, spec.instrument, spec.stall_timeout, spec.on_stall)
    assert said == ("script", "train.py", ("--max-iters", "10"), False, 12.5, "stop")
    assert (spec.device, nproc) == ("auto", 2)
    run.close()
    document["spec"] |= {"on_stall": "explode"}  # a rank can write this file: then it is no spec, named
    (path / "spec.json").write_text(json.dumps(document))
    with pytest.raises(RecordError, match=r"spec\.on_stall: not one of stop, report"):
        FollowedRun(path)


def test_a_folder_that_nodes_share_gives_every_nodes_rank_logs_by_global_rank(tmp_path):
    """Issue #29: `open` of a Slurm job's folder from the login node showed node 0's logs alone."""
    import json
    import time

    from mgpu_tui.engine.records.follow import FollowedRun

    path = tmp_path / "slurm-7-0-ddp"
    (path / "events").mkdir(parents=True)
    for node in (0, 1):
        spec = {"mode": "ddp", "world_size": 4, "nproc": 2, "nnodes": 2, "steps": 10, "device": "cpu"}
        document = {"spec": spec, "created_at": time.time(), "machine": {"hostname": f"bn-host{node + 1}"}}
        (path / f"spec-node{node}.json").write_text(json.dumps(document))
        for local in (0, 1):
            logs = path / "logs" / f"node{node}" / "slurm-7-0_x" / "attempt_0" / str(local)
            logs.mkdir(parents=True)
            (logs / "stdout.log").write_text(f"node {node} local {local}\n")
            (logs / "stderr.log").write_text("")
    # Each node's own telemetry in the shared folder: its host as it last said (a rank may write
    # anything there: a figure that is not one is None).
    samples = {
        0: [{"t": 1, "host": {"cpu": 10.0, "mem_used": 1 << 30}, "gpus": []}],
        1: [
            {
                "t": 1,
                "host": {"cpu": 50.0, "mem_used": 1 << 30},
                "gpus": [{"i": 0, "util": 40}, {"i": 1, "util": 60}],
            },
            {
                "t": 2,
                "host": {"cpu": "hot", "mem_used": 2 << 30},
                "gpus": [{"i": 0, "util": 90}, {"i": 1, "util": 70}],
            },
        ],
    }
    for node, lines in samples.items():
        (path / f"telemetry-node{node}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    run = FollowedRun(path)
    run.poll()
    lines, dropped = run.drain_log_lines()
    assert sorted(lines) == [(r, "stdout", f"node {r // 2} local {r % 2}") for r in range(4)] and not dropped
    machines = run.node_machines()
    assert (machines[0].cpu_percent, machines[0].gpu_util_percent) == (10.0, None)
    assert (machines[1].cpu_percent, machines[1].mem_used_bytes, machines[1].gpu_util_percent) == (
        None,
        2 << 30,
        80.0,
    )
    from mgpu_tui.app.views.run.text import node_heading

    node = run.nodes()[1]
    assert (
        node_heading(node, machines[1]) == "node 1 · bn-host2 · ranks 2-3 · CPU n/a · mem 2.0 GiB · GPUs 80%"
    )
    run.close()


def test_a_runs_comparison_is_read_as_a_name_and_its_runs_found_in_the_order_they_ran(tmp_path):
    """The comparison a run was a row of, as its spec.json says: a NAME or the record is broken (a
    rank can write the file: "../x" or a megabyte of text must not reach a listing); the runs of
    one comparison, oldest first, broken ones left out."""
    import json

    from test_hostile_folder import good_run

    from mgpu_tui.engine.records.history import comparison_runs, list_runs

    root = tmp_path / "runs"
    for name, comparison, created in (
        ("20260101-000002-fsdp", "20260101T000000Z-ab12", 2.0),
        ("20260101-000001-ddp", "20260101T000000Z-ab12", 1.0),
        ("20260101-000003-ddp", "20260102T000000Z-cd34", 3.0),
        ("20260101-000004-ddp", "../../etc", 4.0),
    ):
        path = good_run(root, name)
        document = json.loads((path / "spec.json").read_text())
        document["spec"]["comparison"] = comparison
        document["created_at"] = created
        (path / "spec.json").write_text(json.dumps(document))
    records = list_runs(root)
    hostile = next(r for r in records if r.path.endswith("000004-ddp"))
    assert hostile.status == "broken" and "comparison: not a name" in hostile.reason
    found = comparison_runs(records, "20260101T000000Z-ab12")
    assert [p.name for p in found] == ["20260101-000001-ddp", "20260101-000002-fsdp"]
    assert comparison_runs(records, "nothing-of-that-name") == []


def test_shares_are_charted_on_a_fixed_scale_that_the_title_says():
    """Issue #43: the host memory chart autoscaled with no axis: 1.1 of 23.6 GiB filled its height.
    The totals the telemetry records give memory its scale (CPU and GPU use: 0 to 100%); junk totals
    are no scale."""
    from mgpu_tui.app.widgets.bars import spark_rows
    from mgpu_tui.console import fmt_bytes

    gib = 1 << 30
    series = TelemetrySeries()
    series.add({"t": 1.0, "host": {"cpu": 5, "mem_used": 1.1 * gib, "mem_total": 23.6 * gib},
                "gpus": [{"i": 0, "mem_used": 2 * gib, "mem_total": 80 * gib}]})  # fmt: skip
    series.add({"t": 2.0, "host": {"cpu": 6, "mem_used": 1.2 * gib, "mem_total": "all of it"}})
    assert series.host_mem_total == 23.6 * gib and series.gpu_mem_total == {0: 80 * gib}
    copied = series.copy()
    assert copied.host_mem_total == series.host_mem_total and copied.gpu_mem_total == {0: 80 * gib}
    scale = (0.0, series.host_mem_total)
    rows = spark_rows(series.host_mem, 10, 4, scale=scale).plain.splitlines()
    assert rows[0].strip() == rows[1].strip() == rows[2].strip() == ""  # a twentieth of the height
    assert rows[3].strip()
    title = chart_title("host memory", series.host_mem, fmt_bytes, span="whole run", scale=scale)
    assert title.plain.endswith(f"scale {fmt_bytes(0)} to {fmt_bytes(23.6 * gib)}")
