"""`mgpu-tui exec -- COMMAND`: a command line run as given, its ranks followed whatever starts them.

The seed's own example (tests/scripts/spawn_ddp.py, the PyTorch DDP tutorial's shape: mp.spawn from
__main__, MASTER_PORT set by the script), a one-process job with and without nn.DataParallel, the
sitecustomize it shadows; each against the script's own account (its RESULT lines). More shapes (a
failing or hung spawned rank, fork, no rank) and the frameworks' own launchers are in
tests/frameworks (make test-frameworks); the line's errors in tests/unit/test_exec_line.py."""

import json
import os
import subprocess
import sys

import pytest

from conftest import CLI, REPO, live_processes_of, only_run_dir, results_of, run_exec, summary_from

SCRIPTS = REPO / "tests" / "scripts"
SPAWN = str(SCRIPTS / "spawn_ddp.py")


def test_the_tutorials_mp_spawn_example_is_two_ranks_with_their_own_figures(tmp_path):
    """Run from inside what looks like a torchrun worker (mgpu-tui run --script once started its
    scripts there): with a fixed MASTER_PORT, the spawned ranks took the worker's agent store and
    waited for ever. Under exec, none of that environment reaches the command."""
    port = 20000 + os.getpid() % 20000
    worker = {"TORCHELASTIC_USE_AGENT_STORE": "True", "TORCHELASTIC_RUN_ID": "x", "RANK": "0",
              "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}  # fmt: skip
    done, run_dir = run_exec(
        tmp_path, sys.executable, SPAWN, "--port", str(port), env={**os.environ, **worker}
    )
    summary = summary_from(done.stdout)
    assert summary.status == "ok" and summary.mode == "exec", done.stderr
    truth = results_of(done.stderr)
    assert sorted(truth) == [0, 1]
    assert summary.world_size == 2 and summary.backend == "gloo" and summary.device == "cpu"
    assert summary.steps == 20 and summary.batch_size == 32 and summary.finished_training
    for rank in summary.ranks:
        assert rank.last_step == 20 and rank.samples_per_s > 0 and rank.pid
        assert abs(rank.loss - truth[rank.rank]["loss"]) < 1e-6
        assert rank.peak_mem_bytes > 50 << 20
    assert {r.rank for r in summary.telemetry.ranks} == {0, 1}  # each rank's own process, sampled
    parent = [p for p in summary.processes if p.rank is None]  # mp.spawn's parent: no rank, seen
    assert parent and all(p.of_rank is None for p in parent)
    assert live_processes_of(run_dir) == []


@pytest.mark.parametrize("shape", ["plain", "DataParallel"])
def test_a_one_process_job_counts_its_samples_and_tokens_at_its_model(tmp_path, shape):
    extra = ["--data-parallel"] if shape == "DataParallel" else []
    done, run_dir = run_exec(tmp_path, sys.executable, str(SCRIPTS / "one_process.py"), *extra)
    summary = summary_from(done.stdout)
    assert summary.status == "ok", done.stderr
    (truth,) = results_of(done.stderr).values()
    (rank,) = summary.ranks
    assert summary.world_size == 1 and summary.backend is None and rank.last_step == 12
    assert summary.batch_size == truth["batch"] and rank.samples_per_s > 0
    assert rank.tokens_per_s == pytest.approx(rank.samples_per_s * truth["seq"])
    assert abs(rank.loss - truth["loss"]) < 1e-6
    source = "the batches entering DataParallel, which has no GPU here" if extra else "TinyLM"
    assert source in summary.batch_size_source
    # Its folder reads back as a command's run: the command, and the world size its rank said.
    listed = subprocess.run(
        [*CLI, "runs", "--run-dir", str(run_dir.parent), "--json"], capture_output=True, text=True
    )
    (record,) = json.loads(listed.stdout)["runs"]
    assert record["what"].endswith(f"one_process.py{' --data-parallel' if extra else ''}")
    assert record["world_size"] == 1 and record["status"] == "ok"


def test_the_sitecustomize_it_shadows_still_runs_and_a_python_without_mgpu_tui_sees_nothing(tmp_path):
    """The user's own sitecustomize (on their PYTHONPATH, or a virtual environment's own) runs as it
    would bare; an interpreter that cannot load mgpu-tui's watch prints exactly what it prints bare."""
    own = tmp_path / "own"
    own.mkdir()
    (own / "sitecustomize.py").write_text("import os\nos.environ['SITE_RAN'] = 'yes'\n")
    program = "import os, torch; print('site', os.environ.get('SITE_RAN'))"
    env = {**os.environ, "PYTHONPATH": str(own)}
    done, _ = run_exec(tmp_path, sys.executable, "-c", program, env=env)
    assert summary_from(done.stdout).status == "ok", done.stderr
    assert "site yes" in done.stderr
    # An interpreter that has torch but cannot load mgpu-tui: the base Python, with the environment's
    # packages on its path (their .pth files, mgpu-tui's editable finder among them, are not read).
    packages = next(p for p in sys.path if p.endswith("site-packages") and p.startswith(sys.prefix))
    base = {**env, "PYTHONPATH": f"{own}{os.pathsep}{packages}", "MGPU_WATCH_PATHS": ""}
    base_python = getattr(sys, "_base_executable", sys.executable)
    bare = subprocess.run([base_python, "-c", program], capture_output=True, text=True, env=base, timeout=60)
    assert bare.returncode == 0 and "site yes" in bare.stdout, bare.stderr
    # A virtual environment's own sitecustomize (in its site-packages), as its python runs it.
    venv = tmp_path / "venv"
    subprocess.run([base_python, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    (site,) = venv.glob("lib/python*/site-packages")
    (site / "sitecustomize.py").write_text("print('venv site ran', flush=True)\n")
    (tmp_path / "v").mkdir()
    done, run_dir = run_exec(tmp_path / "v", str(venv / "bin" / "python"), "-c", "print('job ran')")
    assert summary_from(done.stdout).status == "ok", done.stderr
    printed = (run_dir / "logs" / "command" / "stdout.log").read_text()
    assert printed == "venv site ran\njob ran\n"  # its own, once, then the job: nothing more
    runs = tmp_path / "again"
    blind = subprocess.run(
        [*CLI, "exec", "--run-dir", str(runs), "--", "env", "MGPU_WATCH_PATHS=", base_python, "-c", program],
        capture_output=True, text=True, timeout=120, env=base,
    )  # fmt: skip
    assert blind.returncode == 0, blind.stderr
    output = only_run_dir(runs) / "logs" / "command"
    assert (output / "stdout.log").read_text() == bare.stdout
    assert (output / "stderr.log").read_text() == bare.stderr


def test_no_thread_of_the_watch_is_left_when_the_scripts_own_exit_handlers_run(tmp_path):
    """A framework may end its process group in an exit handler. By then the watch's threads are
    gone: one still inside torch when the interpreter finalizes aborts the rank ("terminate called
    without an active exception", exit -6: a DeepSpeed job under exec, in CI). Nothing of the watch
    reaches the script's stderr either (a deprecated torch name, touched, warned there)."""
    done, run_dir = run_exec(tmp_path, sys.executable, str(SCRIPTS / "exit_handler.py"))
    summary = summary_from(done.stdout)
    assert summary.status == "ok", done.stderr
    at_exit = [line for line in done.stderr.splitlines() if line.startswith("AT EXIT ")]
    assert at_exit and json.loads(at_exit[0].removeprefix("AT EXIT ")) == ["MainThread"]
    (truth,) = results_of(done.stderr).values()
    (rank,) = summary.ranks
    assert rank.last_step == 6 and abs(rank.loss - truth["loss"]) < 1e-6
    assert "Warning" not in done.stderr, done.stderr


def test_a_command_that_fails_to_start_says_so_once_and_exits_with_its_own_status(tmp_path):
    """Issue 56: `exec -- bash nope.sh` printed bash's words three times (its own, the summary's cause,
    the cause's detail) and exited 1. The command's own message once, and its own status (127)."""
    done = subprocess.run(
        [*CLI, "exec", "--run-dir", str(tmp_path / "runs"), "--", "bash", "nope.sh"],
        capture_output=True, text=True, cwd=tmp_path, timeout=60,
    )  # fmt: skip
    assert done.returncode == 127, done.stderr
    said = done.stdout + done.stderr
    assert said.count("No such file or directory") == 1, said
    assert "the command exited with code 127" in said
    assert live_processes_of(only_run_dir(tmp_path / "runs")) == []
