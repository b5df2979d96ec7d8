"""Under a real Slurm cluster (slurm_cluster.py): sbatch from the login node, one `mgpu-tui run`
per node through srun with no node flag, and the ways Slurm ends a job: scancel, the time limit's
early signal, a node that dies. Marked ``slurm``: `make test` leaves them out (about two and a
half minutes on two cores); `make test-hosts` and CI run them. Without root or without slurm-wlm
and munge, each skips saying why.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from waiting import wait_until

from tests.conftest import CLI, run_cli, screen, wait_screen
from tests.integration.separate_hosts import HostsUnavailable
from tests.integration.slurm_cluster import KILL_WAIT_S, SlurmCluster

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(180)]
ENDED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL")
LOST_DEADLINE_S = 15  # the promise: a dead node is named by the others within this long


@pytest.fixture
def cluster(tmp_path):
    try:
        with SlurmCluster(tmp_path / "cluster") as made:
            # What the login node's user has: mgpu-tui on the PATH, which sbatch passes on to the job.
            made.env["PATH"] = f"{Path(sys.executable).parent}:{made.env['PATH']}"
            yield made
            left = {n.hostname: made.pids_on(n) for n in made.nodes}
            assert left == {n.hostname: [] for n in made.nodes}, f"processes left running: {left}"
    except HostsUnavailable as exc:
        pytest.skip(f"a Slurm cluster cannot be made here: {exc}")


def batch(tmp_path: Path, *run_args: str, steps: int) -> Path:
    """The batch script `mgpu-tui slurm` writes for a ddp job of two nodes, one CPU rank each."""
    runs = tmp_path / "runs"
    made = run_cli(
        "slurm", "ddp", "--nodes", "2", "--nproc", "1", "--time", "10", "--run-dir", str(runs),
        "--output", str(tmp_path / "job-%j.out"), "--", "--device", "cpu", "--steps", str(steps), *run_args,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    script = tmp_path / "job.sh"
    script.write_text(made.stdout)
    return script


def summaries(tmp_path: Path, job: str, nodes: int = 2) -> dict[int, dict]:
    """Each node's summary in the job's one run folder (step 0), as far as written."""
    folders = sorted((tmp_path / "runs").glob(f"slurm-{job}-0-*"))
    assert len(folders) <= 1, folders
    if not folders:
        return {}
    folder = folders[0]
    found = {}
    for node in range(nodes):
        path = folder / f"summary-node{node}.json"
        if path.exists():
            found[node] = json.loads(path.read_text())
    return found


def wait_for_steps(tmp_path: Path, job: str, timeout: float = 60) -> None:
    """Until both nodes' ranks have stepped (their events are in the shared run folder)."""
    events = tmp_path / "runs" / f"slurm-{job}-0-ddp" / "events"

    def stepped() -> bool:
        return all(
            (events / f"rank{r}.jsonl").exists() and (events / f"rank{r}.jsonl").stat().st_size
            for r in (0, 1)
        )

    if wait_until(stepped, timeout, every=0.3):
        return
    raise AssertionError(f"the ranks never stepped: {sorted(p.name for p in events.parent.rglob('*'))}")


def output(tmp_path: Path, job: str) -> str:
    return (tmp_path / f"job-{job}.out").read_text(errors="replace")


def test_a_two_node_sbatch_job_with_no_node_flags_is_one_job_of_world_size_two(cluster, tmp_path):
    job = cluster.submit(batch(tmp_path, steps=20))
    assert cluster.wait_state(job, ENDED, timeout=120) == "COMPLETED", output(tmp_path, job) + cluster.logs()
    found = summaries(tmp_path, job)
    assert sorted(found) == [0, 1], output(tmp_path, job)
    for node, summary in found.items():
        assert summary["status"] == "ok" and summary["world_size"] == 2 and summary["steps"] == 20
        slurm = summary["slurm"]
        assert (slurm["job_id"], slurm["step_id"], slurm["node_id"], slurm["nnodes"]) == (job, 0, node, 2)
        assert slurm["nodelist"] == "bn-host[1-2]" and slurm["partition"] == "debug"
        hosts = {n["node"]: n["host"] for n in summary["nodes"]}
        assert hosts == {0: "bn-host1", 1: "bn-host2"}
    said = output(tmp_path, job)
    assert (
        f"Slurm job {job}, step 0, on bn-host[1-2] in partition debug: from Slurm --nnodes 2 --node-rank 0"
        in said
    )
    # The first node as Slurm reaches it (its NodeAddr), on the port the job derives.
    assert f"--rdzv-endpoint {cluster.nodes[0].address}:" in said


def test_one_task_a_rank_is_the_same_job_each_task_its_rank(cluster, tmp_path):
    """srun --ntasks-per-node=2 (as Lightning and Megatron launch): each task is one rank, its
    SLURM_PROCID; the four ranks of two hosts train one job."""
    job = cluster.submit(batch(tmp_path, steps=20), "--ntasks-per-node=2")
    assert cluster.wait_state(job, ENDED, timeout=150) == "COMPLETED", output(tmp_path, job) + cluster.logs()
    found = summaries(tmp_path, job, nodes=4)
    assert sorted(found) == [0, 1, 2, 3], output(tmp_path, job)
    for task, summary in found.items():
        assert (summary["status"], summary["world_size"], summary["steps"]) == ("ok", 4, 20)
        slurm = summary["slurm"]
        assert (slurm["procid"], slurm["tasks_per_node"], slurm["node_id"]) == (task, 2, task // 2)
        assert [r["rank"] for r in summary["ranks"]] == [0, 1, 2, 3]
        hosts = {n["node"]: n["host"] for n in summary["nodes"]}
        assert hosts == {0: "bn-host1", 1: "bn-host1", 2: "bn-host2", 3: "bn-host2"}
    assert output(tmp_path, job).count("(one rank a task, 2 tasks a node)") == 4


def test_an_unchanged_script_under_srun_torchrun_is_one_job_with_no_node_flags(cluster, tmp_path):
    """The PyTorch tutorial's trainer, its torchrun line with one word added, no node named."""
    script = tmp_path / "job.sh"
    trainer = Path(__file__).parents[1] / "scripts" / "ddp_trainer.py"
    script.write_text(
        "#!/bin/bash\n"
        f"#SBATCH --nodes=2 --ntasks-per-node=1 --output={tmp_path}/job-%j.out\n"
        f"srun mgpu-tui torchrun --nproc-per-node 1 --run-dir {tmp_path}/runs --json "
        f"{trainer} 2 1 --batch_size 32\n"
    )
    job = cluster.submit(script)
    assert cluster.wait_state(job, ENDED, timeout=120) == "COMPLETED", output(tmp_path, job) + cluster.logs()
    found = summaries(tmp_path, job)
    assert sorted(found) == [0, 1], output(tmp_path, job)
    for node, summary in found.items():
        assert (summary["status"], summary["world_size"], summary["steps"], summary["batch_size"]) == (
            "ok",
            2,
            16,
            64,
        )
        assert (summary["slurm"]["job_id"], summary["slurm"]["node_id"]) == (job, node)
    assert f"Slurm job {job}, step 0, on bn-host[1-2]" in output(tmp_path, job)


def test_scancel_ends_every_node_within_killwait_each_saying_cancelled(cluster, tmp_path):
    job = cluster.submit(batch(tmp_path, steps=100_000))
    wait_for_steps(tmp_path, job)
    cancelled_at = time.monotonic()
    assert cluster.on_head("scancel", job).returncode == 0
    assert cluster.wait_state(job, ENDED, timeout=KILL_WAIT_S + 20) == "CANCELLED"
    ended_in = time.monotonic() - cancelled_at
    assert ended_in < KILL_WAIT_S, f"the job took {ended_in:.1f} s to end (KillWait {KILL_WAIT_S} s)"
    found = summaries(tmp_path, job)
    assert sorted(found) == [0, 1], output(tmp_path, job)
    for summary in found.values():
        assert (summary["status"], summary["stopped_by"]) == ("interrupted", "cancelled")
    said = output(tmp_path, job)
    assert (
        said.count(f"Slurm job {job}, step 0, on bn-host[1-2] in partition debug: cancelled (scancel)") >= 2
    )
    assert said.count("Exited with exit code 130") == 2  # each node's mgpu-tui: interrupted


def test_the_time_limits_early_signal_is_named_as_the_time_limit(cluster, tmp_path):
    # One minute, and the early signal 50 s before it: Slurm sends it within about half a minute.
    job = cluster.submit(batch(tmp_path, steps=100_000), "--time=1", "--signal=TERM@50")
    assert cluster.wait_state(job, ENDED, timeout=90) in ("FAILED", "TIMEOUT"), output(tmp_path, job)
    found = summaries(tmp_path, job)
    assert sorted(found) == [0, 1], output(tmp_path, job)
    for summary in found.values():
        assert (summary["status"], summary["stopped_by"]) == ("interrupted", "time limit")
    assert output(tmp_path, job).count("stopped at its time limit") >= 2


def test_a_node_that_dies_is_named_by_the_other_within_15_s(cluster, tmp_path):
    job = cluster.submit(batch(tmp_path, steps=100_000))
    wait_for_steps(tmp_path, job)
    dead = cluster.nodes[1]
    cluster.kill_node(dead)  # its slurmd and every process on it
    killed_at = time.monotonic()
    while time.monotonic() - killed_at < LOST_DEADLINE_S and 0 not in summaries(tmp_path, job):
        time.sleep(0.3)
    found = summaries(tmp_path, job)
    assert 0 in found, f"node 0 had not ended {LOST_DEADLINE_S} s after node 1 died:\n{output(tmp_path, job)}"
    cause = found[0]["root_cause"]
    assert found[0]["status"] == "failed" and cause is not None
    assert dead.hostname in json.dumps(cause), cause
    # Slurm itself learns of the node only after SlurmdTimeout: the job is ended by hand, and node
    # 0's processes of the run are gone (the fixture checks), whatever Slurm still waits for.
    cluster.on_head("scancel", job)
    wait_until(lambda: not cluster.pids_on(cluster.nodes[0]), KILL_WAIT_S + 5, every=0.3)


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_open_jobid_on_the_login_node_follows_every_node_and_stops_the_job_through_scancel(cluster, tmp_path):
    job = cluster.submit(batch(tmp_path, steps=100_000))
    wait_for_steps(tmp_path, job)
    session = f"mgpu-slurm-{time.monotonic_ns()}"
    app = cluster.head.argv(  # the login node: outside the allocation
        "env", "-u", "COLUMNS", "-u", "LINES", f"XDG_STATE_HOME={tmp_path}/state", *CLI,
        "open", job, "--run-dir", str(tmp_path / "runs"),
    )  # fmt: skip
    command = " ".join(shlex.quote(a) for a in app)
    subprocess.run(
        ["tmux", "new-session", "-d", "-s", session, "-x", "160", "-y", "50", command],
        check=True,
        env=cluster.env,
    )
    try:
        # Live: both nodes, each by its host, each with its rank stepping, and both nodes' logs.
        assert wait_screen(session, r"node 0 · bn-host1 · ranks 0", timeout=30), screen(session)
        # Each node's host as its own telemetry says, from the folder the nodes share.
        assert wait_screen(session, r"node 1 · bn-host2 · ranks 1 · CPU \d+% · mem \d"), screen(session)
        assert wait_screen(session, r"rank 1  running +\d+"), screen(session)
        assert wait_screen(session, r"rank 1 ddp on cpu, rank 1 of 2"), screen(session)
        subprocess.run(["tmux", "send-keys", "-t", session, "s"], check=True)
        assert wait_screen(session, rf"Slurm job {job} on bn-host\[1-2\]\. Cancel the job"), screen(session)
        subprocess.run(["tmux", "send-keys", "-t", session, "y"], check=True)
        assert cluster.wait_state(job, ENDED, timeout=KILL_WAIT_S + 20) == "CANCELLED"
        # After the end: the nodes' own summaries, read from the shared folder.
        assert wait_screen(session, rf"Slurm job {job}, step 0, on bn-host\[1-2\].*cancelled \(scancel\)"), (
            screen(session)
        )
        assert re.search(r"node 1 · bn-host2 · ranks 1", screen(session)), screen(session)
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
    for summary in summaries(tmp_path, job).values():
        assert summary["stopped_by"] == "cancelled"
