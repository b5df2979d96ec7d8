"""`mgpu-tui compare` and `mgpu-tui scale`: real CPU runs reduced to rows, and the reports they write."""

import csv
import io
import json
import re
from pathlib import Path

import pytest

from conftest import live_processes_of, once_per_session, run_cli
from mgpu_tui.engine.compare import comparison as compare
from mgpu_tui.engine.compare.comparison import CompareSettings, Comparison, Row
from mgpu_tui.engine.compare.runner import Runner
from mgpu_tui.engine.launch.spec import LaunchSpec
from mgpu_tui.engine.machine import host as host_module
from mgpu_tui.engine.planning.shapes import MlpShape
from mgpu_tui.engine.protocol.typed import build
from mgpu_tui.reports import compare as compare_output

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def nothing_left(rows: list[dict]) -> None:
    for row in rows:
        assert live_processes_of(Path(row["run_dir"])) == []


@pytest.fixture(scope="module")
def compared(tmp_path_factory) -> tuple[dict, Path, str]:
    def compare(folder: Path) -> tuple[dict, Path, str]:
        out = folder / "r.json"
        # Two modes whose ranks count samples differently (every rank; the first stage only).
        result = run_cli(
            "compare",
            "ddp",
            "pipeline",
            "--nproc",
            "2",
            "--steps",
            "12",
            "--device",
            "cpu",
            "--out",
            str(out),
            "--run-dir",
            str(out.parent / "runs"),
            timeout=240,
        )
        assert result.returncode == 0, result.stderr
        return json.loads(out.read_text()), out, result.stdout

    return once_per_session(tmp_path_factory, "compare", compare)


def test_compare_gives_ok_rows_that_trained_the_same_function(compared):
    report, out, stdout = compared
    rows = report["rows"]
    assert [r["mode"] for r in rows] == ["ddp", "pipeline"]
    for r in rows:
        assert r["status"] == "ok" and r["world_size"] == 2 and r["samples_per_s"] > 0
        assert r["step_time_s_median"] > 0 and r["peak_mem_bytes"] > 0 and len(r["loss_curve"]) == 12
        # samples/s per device and TFLOP/s follow from samples/s: per rank on the CPU, 3 x forward FLOPs.
        assert r["samples_per_s_per_device"] == pytest.approx(r["samples_per_s"] / 2)
        flops = compare.train_flops_per_sample(MlpShape(256, 4))
        assert r["tflops_per_device"] == pytest.approx(r["samples_per_s_per_device"] * flops / 1e12)
        assert r["mfu"] is None and r["tokens_per_s"] is None  # no GPU peak here; the demos have no tokens
    losses = [r["final_loss"] for r in rows]
    assert max(losses) == pytest.approx(min(losses), rel=1e-3)
    nothing_left(rows)
    # The table marks one best value per marked column; the chart image sits beside the report.
    assert stdout.count("*") >= 5 and "samples/s over steps" in stdout
    assert out.with_suffix(".png").read_bytes().startswith(PNG_MAGIC)


def test_each_run_records_its_comparison_and_runs_lists_it(compared):
    """Issue #31: nothing said which comparison a run belonged to. Each run's spec.json records the
    comparison's id (the report's), and `mgpu-tui runs` lists it beside the run."""
    report, out, _ = compared
    assert re.fullmatch(r"\d{8}T\d{6}Z-[0-9a-f]{4}", report["id"]), report["id"]
    for row in report["rows"]:
        spec = json.loads((Path(row["run_dir"]) / "spec.json").read_text())
        assert spec["spec"]["comparison"] == report["id"]
    listed = run_cli("runs", "--run-dir", str(out.parent / "runs"))
    assert listed.returncode == 0 and " comparison " in listed.stdout.splitlines()[0], listed.stdout
    assert listed.stdout.count(report["id"]) == 2
    as_json = json.loads(run_cli("runs", "--json", "--run-dir", str(out.parent / "runs")).stdout)
    assert [r["comparison"] for r in as_json["runs"]] == [report["id"]] * 2


def test_a_comparison_read_back_from_its_runs_has_the_rows_it_had_live(compared):
    """One builder of rows (comparison.build_row): the live comparison's and the one read back from
    the runs' folders (the Runs view's m, compare --runs) hold the same figures, curves included;
    two builders had drifted apart. Only the label may differ: a row read back is named by its run."""
    from mgpu_tui.engine.compare.records import comparison_from_runs

    report = compared[0]
    again = comparison_from_runs([Path(row["run_dir"]) for row in report["rows"]])
    for live, read in zip(report["rows"], (r.to_json() for r in again.rows), strict=True):
        assert read["run_dir"] == live["run_dir"]
        same = {k: v for k, v in live.items() if k not in ("label",)}
        assert {k: read[k] for k in same} == json.loads(json.dumps(same)), live["mode"]


def test_the_markdown_and_csv_reports_parse(compared):
    report = compared[0]
    rows = [build(Row, r) for r in report["rows"]]  # the report read back as the types it came from
    comparison = Comparison("compare", build(CompareSettings, report["settings"]), rows)
    markdown = compare_output.markdown_text(comparison).splitlines()
    table = [line for line in markdown if line.startswith("|")]
    header = [c.strip() for c in table[0].strip("|").split("|")]
    assert header[:4] == ["mode", "status", "ranks", "samples/s"]
    body = [[c.strip() for c in line.strip("|").split("|")] for line in table[2:]]
    assert [cells[0] for cells in body] == ["ddp", "pipeline"]
    assert sum(cells[3].startswith("**") for cells in body) == 1  # one best throughput, in bold
    rows = list(csv.DictReader(io.StringIO(compare_output.csv_text(comparison))))
    assert [r["mode"] for r in rows] == ["ddp", "pipeline"]
    assert [float(r["samples_per_s"]) for r in rows] == [r["samples_per_s"] for r in report["rows"]]


def test_weak_scaling_doubles_the_global_batch_and_the_lr_and_gives_the_loss_after_the_same_samples(tmp_path):
    out = tmp_path / "s.json"
    result = run_cli(
        "scale",
        "ddp",
        "--nproc",
        "1,2",
        "--weak",
        "--steps",
        "20",
        "--device",
        "cpu",
        "--batch-size",
        "32",
        "--out",
        str(out),
        "--run-dir",
        str(tmp_path / "runs"),
        timeout=180,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(out.read_text())
    one, two = report["points"]
    assert (one["nproc"], one["batch_size"], two["nproc"], two["batch_size"]) == (1, 32, 2, 64)
    assert (one["lr"], two["lr"]) == (0.02, 0.04)  # the linear rule
    for point in (one, two):
        assert point["samples_per_s"] > 0 and point["final_loss"] > 0
    assert one["speedup"] == 1.0 and one["efficiency"] == 1.0
    assert two["efficiency"] == pytest.approx(two["samples_per_s"] / (2 * one["samples_per_s"]))
    # Two gloo ranks share this machine's two cores: a rank's samples counted twice would show as
    # about 2. Where the machine was busy (the suite's other worker ran ranks too), the timings of
    # the two points are not comparable, and the report says so itself: that is the check then.
    busy = [r["busy"] for r in report["rows"] if r["busy"]]
    if busy:
        assert two["efficiency"] > 0 and "BUSY MACHINE" in result.stdout + result.stderr, busy
    else:
        assert 0 < two["efficiency"] <= 1.2
    # The same 640 samples: all 20 steps of one rank, the first 10 of two.
    assert (one["loss_step"], two["loss_step"]) == (20, 10)
    assert one["loss_after_common_samples"] == one["final_loss"]
    assert two["loss_after_common_samples"] == dict(map(tuple, report["rows"][1]["loss_curve"]))[10]
    # What each rank trained with: the spec's batch, lr and warm-up reached the demo.
    for row, lr in zip(report["rows"], (0.02, 0.04)):
        hello = json.loads((Path(row["run_dir"]) / "events" / "rank0.jsonl").read_text().splitlines()[0])
        assert (hello["config"]["lr"], hello["config"]["warmup_steps"]) == (lr, 4)
        assert hello["config"]["batch_size"] == row["batch_size"]
    assert "loss @ 640 samples" in result.stdout and "weak scaling" in result.stdout
    assert "efficiency" in result.stdout and "speedup (ideal: 1x, 2x)" in result.stdout
    nothing_left(report["rows"])


def test_a_batch_sweep_at_one_rank_count_reports_throughput_and_loss_by_batch(tmp_path):
    out = tmp_path / "b.md"
    result = run_cli(
        "scale",
        "ddp",
        "--nproc",
        "1",
        "--batch-size",
        "32,16",
        "--steps",
        "10",
        "--lr-rule",
        "sqrt",
        "--device",
        "cpu",
        "--out",
        str(out),
        "--run-dir",
        str(tmp_path / "runs"),
        "--json",
        timeout=180,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    small, big = report["points"]
    assert (small["batch_size"], big["batch_size"]) == (16, 32) and report["settings"]["sweep"] == "batch"
    assert small["lr"] == 0.02 and big["lr"] == pytest.approx(0.02 * 2**0.5)  # the sqrt rule
    assert big["speedup"] == pytest.approx(big["samples_per_s"] / small["samples_per_s"])
    assert small["efficiency"] is None and big["efficiency"] is None  # the ranks did not change
    assert (small["loss_step"], big["loss_step"]) == (10, 5)  # the same 160 samples
    assert "global batch 32: ok" in result.stderr  # each point named by its batch as it ends
    markdown = out.read_text()
    assert "| ranks | status | global batch | lr |" in markdown
    assert "a batch sweep at one rank count" in markdown
    nothing_left(report["rows"])


def test_the_warm_up_ramps_the_learning_rate_linearly_to_its_peak():
    import torch

    from mgpu_tui.demos import harness

    args = harness.parse_args("warm-up", ["--lr", "0.4", "--warmup-steps", "4"])
    optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=args.lr)
    seen = []
    for step in range(1, 7):
        harness.warm_up(optimizer, args, step)
        seen.append(optimizer.param_groups[0]["lr"])
    assert seen == pytest.approx([0.1, 0.2, 0.3, 0.4, 0.4, 0.4])


def test_a_failing_mode_is_a_row_with_its_cause_and_the_others_run(tmp_path):
    # Two modes at once (--parallel on the CPU), the second made to raise at step 3 on rank 1.
    template = LaunchSpec(mode="ddp", nproc=2, steps=8, device="cpu", run_root=tmp_path)
    ok, failing = compare.compare_specs(["single", "tp"], template)
    failing = compare.dataclasses.replace(failing, demo_args=("--fail-at-step", "3", "--fail-rank", "1"))
    comparison = compare.new_comparison(["single", "tp"], template, parallel=True)
    runner = Runner([ok, failing], comparison, host=host_module.probe())
    runner.check()
    runner.run()
    rows = {r.mode: r for r in comparison.rows}
    assert rows["single"].status == "ok" and rows["single"].samples_per_s > 0
    assert rows["tp"].status == "failed"
    # In the words the CLI and the app use. The exit is as it happened: 1, or a signal while the rank
    # tears down after its exception (gloo's teardown race: test_failures.py).
    expected = rows["tp"].root_cause
    assert re.fullmatch(
        r"rank 1 failed first \((exit code 1|SIGTERM|SIGSEGV|SIGABRT)\): "
        r"RuntimeError: injected failure at step 3 on rank 1",
        expected,
    ), expected
    assert comparison.failed and comparison.to_json()["note"] == compare.PARALLEL_NOTE
    assert f"tp failed: {expected}" in compare_output.compare_table(comparison)
    nothing_left([r.to_json() for r in comparison.rows])


def test_bad_input_is_refused_before_anything_runs(tmp_path):
    # The other bad arguments are in tests/test_bad_input.py; this one through a real process.
    result = run_cli("scale", "ddp", "--nproc", "1,x", "--run-dir", str(tmp_path / "runs"))
    assert result.returncode == 2 and "must be whole numbers separated by commas" in result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "runs").exists()


def test_parallel_gives_each_mode_its_own_gpus_on_an_8_gpu_box():
    """--parallel on a multi-GPU box, as a pure computation: disjoint GPU sets, mapped through
    the user's own CUDA_VISIBLE_DEVICES, and a refusal when the modes need more GPUs than there are."""
    host = host_module.Host(cpu_count=64, gpu_count=8, gpu_note="8 GPU(s)", torch_available=True)
    template = LaunchSpec(mode="ddp", nproc=2, device="cuda")
    specs = compare.compare_specs(["ddp", "ddp_mp", "single"], template)
    runner = Runner(
        specs,
        compare.new_comparison(["ddp", "ddp_mp", "single"], template, True),
        host=host,
        environ={"CUDA_VISIBLE_DEVICES": "7,6,5,4,3,2,1,0"},
    )
    sets = runner._gpu_sets()
    assert sets == [[0, 1], [2, 3, 4, 5], [6]]  # ddp: 2 ranks; ddp_mp: 2 ranks x 2 GPUs; single: 1
    assert [runner._environ_for(s)["CUDA_VISIBLE_DEVICES"] for s in sets] == ["7,6", "5,4,3,2", "1"]
    assert runner._host_for(sets[1]).gpu_count == 4
    too_many = compare.compare_specs(["ddp_mp", "ddp_mp", "ddp"], template)
    crowded = Runner(too_many, compare.new_comparison(["a"], template, True), host=host, environ={})
    with pytest.raises(compare.SpecError, match="--parallel needs 10 GPUs"):
        crowded.check()


@pytest.mark.parametrize(
    "mode, world, nproc, gpus, expected",
    [
        ("ddp", 8, 8, 8, 8),
        ("ddp", 2, 2, 1, 1),
        ("ddp_mp", 2, 2, 1, 1),
        ("ddp_mp", 2, 2, 8, 4),
        ("mp", 1, 1, 1, 1),
        ("dp", 1, 1, 4, 4),
    ],
)
def test_per_gpu_figures_count_the_gpus_a_run_occupies(mode, world, nproc, gpus, expected):
    # Ranks sharing one GPU (--share-gpus) occupy that GPU once: per-GPU rates and MFU divide by 1.
    assert compare.devices_used(mode, "cuda", world, nproc, 2, gpus) == expected
    assert compare.devices_used(mode, "cpu", world, nproc, 2, 0) == world
