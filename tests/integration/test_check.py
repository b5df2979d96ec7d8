"""`mgpu-tui --check`: every level on this machine, and each failure path made real.

The rank checks run in one launch; a wrong collective result and a crashing mode
are injected through MGPU_CHECK_INJECT (engine/rank_checks.py), torch is made
unimportable by a shadowing package, and the environment checks are handed the
reading of broken machines (an NVML stand-in where a GPU is needed).
"""

import json
import os
import signal
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import pytest
from waiting import wait_until

from conftest import CLI, REPO, TOPOLOGIES, live_processes_of, run_cli

SCHEMA = json.loads((REPO / "docs" / "check-schema.json").read_text())
FIXTURES = TOPOLOGIES
LEVEL_ONE = [
    "python",
    "torch",
    "cuda",
    "nccl",
    "backends",
    "nvml",
    "gpu_count",
    "pynvml_package",
    "topology",
    "p2p",
    "shm",
    "open_files",
    "env_vars",
    "omp_num_threads",
]
MODES = ["single", "dp", "mp", "hybrid", "ddp", "ddp_mp", "pipeline", "fsdp", "tp", "rpc"]


def check(*args, env=None, timeout=180):
    environ = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MGPU_CHECK_INJECT")}
    return run_cli("--check", *args, env={**environ, **(env or {})}, timeout=timeout)


def junit_cases(path: Path) -> dict[str, ET.Element]:
    suites = ET.parse(path).getroot()
    assert suites.tag == "testsuites"
    return {case.get("name"): case for case in suites.iter("testcase")}


def no_rank_left(check_dir: Path) -> None:
    launches = [p for p in check_dir.iterdir() if (p / "spec.json").exists()]
    assert launches
    for launch in launches:
        assert live_processes_of(launch) == []


def test_level_one_reads_the_environment_and_starts_no_rank(tmp_path):
    result = check("--level", "1", "--json", "-", "--run-dir", str(tmp_path / "runs"))
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)  # with --json -, stdout is the JSON alone
    jsonschema.validate(report, SCHEMA)
    assert [c["name"] for c in report["checks"]] == LEVEL_ONE
    by_name = {c["name"]: c for c in report["checks"]}
    assert by_name["torch"]["status"] == "pass" and by_name["torch"]["metrics"]["torch_version"]
    assert by_name["backends"]["metrics"]["gloo"] is True
    assert by_name["nvml"]["status"] == "skip" and "library not found" in by_name["nvml"]["detail"]
    assert report["run_dir"] is None and not (tmp_path / "runs").exists()
    assert "PASS  python" in result.stderr  # the table moved to stderr


def test_level_three_verifies_every_mode_and_survives_a_wrong_collective_and_a_crash(tmp_path):
    # all_reduce made wrong on rank 1, fsdp made to raise in its smoke run on rank 1:
    # both fail by name; fsdp's verify is skipped; the checks after it run in a new launch.
    # Level 3 holds every check of level 2; .ci/run runs level 2 after the tests, where it must
    # pass (exit 0) on a healthy machine.
    # The smoke and verify runs train the GPT (--model): .ci/run's own --check trains the MLP.
    result = check(
        "--level",
        "3",
        "--model",
        "gpt-tiny",
        "--json",
        str(tmp_path / "r.json"),
        "--junit",
        str(tmp_path / "r.xml"),
        "--run-dir",
        str(tmp_path / "runs"),
        env={"MGPU_CHECK_INJECT": "all_reduce,smoke:fsdp"},
    )
    assert result.returncode == 1, result.stdout + result.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    jsonschema.validate(report, SCHEMA)
    checks = {c["name"]: c for c in report["checks"]}
    assert checks["collective:all_reduce"]["status"] == "fail"
    assert checks["collective:all_reduce"]["detail"].startswith("rank 1 got 1 of 4096 values wrong")
    assert checks["collective:all_gather"]["status"] == "pass"
    # The crash names the rank that raised, not a peer that lost its connection.
    assert checks["smoke:fsdp"]["status"] == "fail"
    assert checks["smoke:fsdp"]["detail"] == "rank 1: RuntimeError: injected failure at step 2 on rank 1"
    skipped = checks["verify:fsdp"]
    assert (skipped["status"], skipped["detail"]) == ("skip", "its smoke run failed")
    # Every other mode ran (tp and rpc after the crash) and trained exactly the baseline's model.
    for mode in MODES:
        if mode != "fsdp":
            assert checks[f"smoke:{mode}"]["status"] == "pass", checks[f"smoke:{mode}"]
            assert checks[f"verify:{mode}"]["status"] == "pass", checks[f"verify:{mode}"]
            assert checks[f"verify:{mode}"]["metrics"]["max_abs_diff"] <= 1e-5
            degenerate = mode in ("dp", "mp", "hybrid", "ddp_mp")
            assert checks[f"smoke:{mode}"]["detail"].endswith("(degenerate on the CPU)") == degenerate
    points = checks["sweep:all_reduce"]["metrics"]["points"]
    assert [p["size_bytes"] for p in points] == [2**k for k in range(3, 29)]  # 8 B .. 256 MiB
    for p in points:
        assert p["algbw_GBps"] == pytest.approx(p["size_bytes"] / p["time_us"] / 1e3)
    assert "all_reduce sweep on 2 rank(s)" in result.stdout and "268435456" in result.stdout
    assert checks["copy_matrix"]["status"] == "skip"
    one, two = checks["scaling:ddp"]["metrics"]["points"]
    assert two["efficiency"] == pytest.approx(two["samples_per_s"] / (2 * one["samples_per_s"]))
    bandwidth = checks["bandwidth:all_reduce"]["metrics"]
    # nccl-tests' definitions, with n = 2: busbw = algbw x 2(n-1)/n = algbw.
    assert bandwidth["algbw_GBps"] == pytest.approx(bandwidth["size_bytes"] / bandwidth["time_us"] / 1e3)
    assert bandwidth["busbw_GBps"] == pytest.approx(bandwidth["algbw_GBps"])
    assert bandwidth["expected_busbw_GBps"] is None  # CPU ranks: shown, never graded
    assert checks["bandwidth:all_reduce"]["detail"].endswith(
        "not graded: CPU ranks: no GPU link to grade it against"
    )
    assert checks["smoke:ddp"]["metrics"]["final_loss"] < checks["smoke:ddp"]["metrics"]["first_loss"]
    assert report["nproc"] == 2 and report["device"] == "cpu" and not report["passed"]
    assert report["model"] == "gpt-tiny" and "the smoke runs train gpt-tiny" in result.stdout
    hello = json.loads(
        (Path(report["run_dir"]) / "smoke" / "ddp" / "events" / "rank0.jsonl").read_text().splitlines()[0]
    )
    assert hello["config"]["model"] == "gpt-tiny"
    # The table: one row per check, then the counts.
    assert "PASS  collective:all_gather" in result.stdout and "FAIL  smoke:fsdp" in result.stdout
    assert f"{len(checks)} checks: " in result.stdout.splitlines()[-1]
    # JUnit, parsed back: one testcase per check, skips as <skipped>, the two failures as <failure>.
    cases = junit_cases(tmp_path / "r.xml")
    assert set(cases) == set(checks)
    skipped = {n for n, c in cases.items() if c.find("skipped") is not None}
    assert skipped == {n for n, c in checks.items() if c["status"] == "skip"}
    failures = {n for n, c in cases.items() if c.find("failure") is not None}
    assert failures == {"collective:all_reduce", "smoke:fsdp"} and report["counts"]["fail"] == 2
    no_rank_left(Path(report["run_dir"]))


def test_a_level_that_does_not_exist_is_usage(tmp_path):
    # Every other bad argument is in tests/test_bad_input.py; this one through a real process.
    result = check("--level", "9", "--run-dir", str(tmp_path / "runs"))
    assert result.returncode == 2 and result.stderr.strip() == "mgpu-tui: --level must be 1, 2 or 3, got 9."


def test_required_gpus_missing_fails_level_one():
    result = check("--level", "1", "--require-gpus", "1")
    assert result.returncode == 1
    assert "FAIL  gpu_count" in result.stdout and "--require-gpus 1" in result.stdout


def test_torch_that_cannot_be_imported(tmp_path):
    # A package named torch earlier on the path that fails to import, as a broken install does.
    (tmp_path / "shadow" / "torch").mkdir(parents=True)
    broken = tmp_path / "shadow" / "torch" / "__init__.py"
    broken.write_text("raise ImportError('libtorch_cpu.so: cannot open')\n")
    env = {"PYTHONPATH": str(tmp_path / "shadow")}
    level_one = check("--level", "1", env=env)
    assert level_one.returncode == 1
    assert "FAIL  torch" in level_one.stdout and "libtorch_cpu.so: cannot open" in level_one.stdout
    level_two = check("--junit", str(tmp_path / "r.xml"), "--run-dir", str(tmp_path / "runs"), env=env)
    assert level_two.returncode == 3
    assert "torch cannot be imported" in level_two.stderr and "Traceback" not in level_two.stderr
    assert "torch" in junit_cases(tmp_path / "r.xml")  # what ran is kept


def test_ctrl_c_stops_every_rank_exits_130_and_keeps_what_ran(tmp_path):
    runs = tmp_path / "runs"
    proc = subprocess.Popen(
        [*CLI, "--check", "--json", str(tmp_path / "r.json"), "--run-dir", str(runs)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_until(lambda: list(runs.glob("*-check/*-ranks/checks/rank0.jsonl")), 60, every=0.1)  # at work
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted; every rank was stopped" in err and "Traceback" not in err
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["interrupted"] and not report["passed"] and report["checks"][0]["name"] == "python"
    no_rank_left(Path(report["run_dir"]))
