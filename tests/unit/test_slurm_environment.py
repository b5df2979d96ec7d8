"""Slurm's own words: the job read from a step's environment, the node options it gives `run`,
why Slurm stopped a run, and the batch script `mgpu-tui slurm` writes.

The environments and scontrol records are the ones Slurm 22.05 (Debian's slurm-wlm) gave on the
test cluster (tests/integration/slurm_cluster.py), cut to what mgpu-tui reads.
"""

from __future__ import annotations

import argparse
import shlex

import pytest

from mgpu_tui.commands.launchers.slurm import batch_script, bind_task_gpu, from_slurm
from mgpu_tui.engine.launch.slurm import (
    PORTS,
    SlurmEnvironmentError,
    expand_counts,
    expand_hostlist,
    node_options,
    slurm_job,
    task_device,
)
from mgpu_tui.engine.machine.slurm import JobState, field, parse_time, why_ended
from mgpu_tui.errors import UsageError
from mgpu_tui.parser import build_parser

# `srun -N2 env` on the test cluster: node 1 of bn-host[1-2], job 2, step 0.
STEP_ENV = {
    "SLURMD_NODENAME": "bn-host2",
    "SLURM_CLUSTER_NAME": "mgputest",
    "SLURM_JOB_ID": "2",
    "SLURM_JOBID": "2",
    "SLURM_JOB_NODELIST": "bn-host[1-2]",
    "SLURM_JOB_NUM_NODES": "2",
    "SLURM_JOB_PARTITION": "debug",
    "SLURM_LOCALID": "0",
    "SLURM_NNODES": "2",
    "SLURM_NODEID": "1",
    "SLURM_NODELIST": "bn-host[1-2]",
    "SLURM_NTASKS": "2",
    "SLURM_PROCID": "1",
    "SLURM_STEPID": "0",
    "SLURM_STEP_ID": "0",
    "SLURM_STEP_NODELIST": "bn-host[1-2]",
    "SLURM_STEP_NUM_NODES": "2",
    "SLURM_STEP_NUM_TASKS": "2",
    "SLURM_STEP_TASKS_PER_NODE": "1(x2)",
    "SLURM_TASKS_PER_NODE": "1(x2)",
}


@pytest.mark.parametrize(
    ("expression", "hosts"),
    [
        ("bn-host[1-2]", ("bn-host1", "bn-host2")),
        ("gpu[01-03,07],login", ("gpu01", "gpu02", "gpu03", "gpu07", "login")),
        ("node7", ("node7",)),
        ("r[1-2]n[08-09]", ("r1n08", "r1n09", "r2n08", "r2n09")),
        ("a[9-10]", ("a9", "a10")),
    ],
)
def test_a_host_list_expands_as_slurm_writes_it(expression, hosts):
    assert expand_hostlist(expression) == hosts


@pytest.mark.parametrize("expression", ["", "gpu[1-", "gpu[3-1]", "gpu[a-b]", "gpu[[1]]", "g[0-99999999]"])
def test_a_host_list_that_is_not_one_is_one_sentence(expression):
    with pytest.raises(SlurmEnvironmentError, match="node list"):
        expand_hostlist(expression)


def test_task_counts_expand_per_node():
    assert expand_counts("2(x3),1") == (2, 2, 2, 1)
    assert expand_counts("1(x2)") == (1, 1)
    with pytest.raises(SlurmEnvironmentError):
        expand_counts("2(x)")


def test_a_steps_environment_is_its_job_step_and_node():
    job = slurm_job(STEP_ENV)
    assert job is not None
    assert (job.job_id, job.step_id, job.restart_count, job.nnodes, job.node_id) == ("2", 0, 0, 2, 1)
    assert (job.ntasks, job.tasks_per_node, job.procid, job.localid) == (2, 1, 1, 0)
    assert (job.partition, job.cluster, job.hosts) == ("debug", "mgputest", ("bn-host1", "bn-host2"))
    assert job.one_task_per_node
    assert job.run_id == "slurm-2-0"
    assert slurm_job({"PATH": "/usr/bin"}) is None  # outside Slurm


def test_the_batch_script_itself_is_the_job_without_a_step():
    env = {k: v for k, v in STEP_ENV.items() if "STEP" not in k}
    job = slurm_job({**env, "SLURM_NODEID": "0"})
    assert job is not None and job.step_id is None and job.run_id == "slurm-2-batch"


def test_every_step_and_restart_is_a_run_of_its_own_with_its_own_port():
    runs = {
        slurm_job({**STEP_ENV, "SLURM_STEP_ID": str(step), "SLURM_RESTART_COUNT": str(restart)})
        for step in range(3)
        for restart in range(3)
    }
    assert len({j.run_id for j in runs if j}) == 9
    assert len({j.port for j in runs if j}) == 9  # these nine: no two alike
    assert all(PORTS[0] <= j.port < PORTS[1] for j in runs if j)
    again = slurm_job({**STEP_ENV, "SLURM_RESTART_COUNT": "1"})
    assert again is not None and again.run_id == "slurm-2-0-r1"


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"SLURM_NODEID": "2"}, "SLURM_NODEID=2 is beyond"),
        ({"SLURM_STEP_NUM_NODES": "3"}, "has 2"),
        ({"SLURM_JOB_ID": "12; rm"}, "not a job id"),
        ({"SLURM_PROCID": "-1"}, "not a number"),
        ({"SLURM_STEP_TASKS_PER_NODE": "1"}, "not one per node"),
    ],
)
def test_a_contradicting_environment_is_named(change, words):
    with pytest.raises(SlurmEnvironmentError, match=words):
        slurm_job({**STEP_ENV, **change})


def test_the_first_node_at_slurms_address_is_the_rendezvous():
    job = slurm_job(STEP_ENV)
    assert job is not None
    options = node_options(job, "10.77.5.2")
    assert options.rdzv_endpoint == f"10.77.5.2:{job.port}"
    assert (options.nnodes, options.node_rank, options.rdzv_id, options.nproc) == (2, 1, "slurm-2-0", None)
    assert node_options(job, None).rdzv_endpoint == f"bn-host1:{job.port}"  # no address: its name
    assert node_options(job, "fd00::2").rdzv_endpoint == f"[fd00::2]:{job.port}"
    gpus = slurm_job({**STEP_ENV, "SLURM_GPUS_ON_NODE": "8"})
    assert gpus is not None and node_options(gpus, None).nproc == 8


def _run_args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["run", "ddp", *argv])


def test_run_in_a_step_takes_the_node_options_from_slurm_and_explicit_flags_win():
    env = {**STEP_ENV, "SLURM_JOB_NUM_NODES": "1", "SLURM_STEP_NUM_NODES": "1", "SLURM_NNODES": "1"}
    env.update(SLURM_STEP_NODELIST="bn-host1", SLURM_NODEID="0", SLURM_STEP_NUM_TASKS="1")
    env.update(SLURM_STEP_TASKS_PER_NODE="1")
    args = _run_args("--nproc", "3")
    job, said = from_slurm(args, env)
    assert job is not None and said is not None
    assert (args.nnodes, args.node_rank, args.rdzv_endpoint, args.rdzv_id, args.nproc) == (
        1,
        0,
        None,  # one node: no rendezvous to share
        "slurm-2-0",
        3,  # given: it wins
    )
    job_words = "Slurm job 2, step 0, on bn-host1 in partition debug"
    assert said == f"{job_words}: from Slurm --nnodes 1 --node-rank 0 --rdzv-id slurm-2-0"


def test_run_with_every_node_flag_given_takes_nothing_from_slurm():
    args = _run_args(
        "--nnodes", "2", "--node-rank", "0", "--rdzv-endpoint", "h:1", "--rdzv-id", "x", "--nproc", "1"
    )
    job, said = from_slurm(args, STEP_ENV)
    assert job is not None and said is not None and said.endswith("nothing (every node option was given)")
    assert (args.nnodes, args.node_rank, args.rdzv_endpoint, args.rdzv_id) == (2, 0, "h:1", "x")


def test_outside_slurm_run_is_one_node_as_before():
    args = _run_args()
    assert from_slurm(args, {}) == (None, None)
    assert (args.nnodes, args.node_rank, args.rdzv_endpoint, args.rdzv_id) == (1, 0, None, None)


# srun --ntasks-per-node=2 on two nodes: the second task of the second node.
TASK_ENV = {
    **STEP_ENV,
    "SLURM_STEP_NUM_TASKS": "4",
    "SLURM_STEP_TASKS_PER_NODE": "2(x2)",
    "SLURM_PROCID": "3",
    "SLURM_LOCALID": "1",
}


def test_a_step_of_several_tasks_a_node_makes_every_task_a_node_of_one_rank():
    args = _run_args()
    job, said = from_slurm(args, TASK_ENV, address_of={"bn-host1": "10.77.5.2"}.get)
    assert job is not None and not job.one_task_per_node and said is not None
    assert (args.nnodes, args.node_rank, args.nproc, args.rdzv_id) == (
        4,
        3,
        1,
        "slurm-2-0",
    )  # rank 3: SLURM_PROCID
    assert f"--rdzv-endpoint 10.77.5.2:{job.port}" in said  # the first node, at Slurm's address for it
    assert said.endswith("--nproc 1 (one rank a task, 2 tasks a node)")
    with pytest.raises(UsageError, match="each one rank: leave out --nproc"):
        from_slurm(_run_args("--nproc", "2"), TASK_ENV, address_of=lambda name: None)
    with pytest.raises(UsageError, match="does not read as Slurm writes it"):
        from_slurm(_run_args(), {**STEP_ENV, "SLURM_NODEID": "x"})


@pytest.mark.parametrize(
    ("visible", "device"),
    [
        (None, "1"),  # the node's GPUs, none bound: the task's own, by SLURM_LOCALID
        ("0,1,2,3", "1"),
        ("GPU-a,GPU-b", "GPU-b"),
        ("3", None),  # Slurm bound one (--gpus-per-task=1): kept
    ],
)
def test_each_task_of_a_node_gets_its_own_gpu(visible, device):
    job = slurm_job(TASK_ENV)
    assert job is not None and task_device(job, visible) == device
    env = {} if visible is None else {"CUDA_VISIBLE_DEVICES": visible}
    bind_task_gpu(job, env)
    assert env.get("CUDA_VISIBLE_DEVICES") == (device or visible)
    one_a_node = slurm_job(STEP_ENV)
    assert one_a_node is not None and task_device(one_a_node, "0,1") is None


# `scontrol show job -o` on the test cluster, while Slurm killed the job's processes.
CANCELLED = (
    "JobId=1 JobName=job3.sh JobState=COMPLETING Reason=None Dependency=(null) EndTime=2026-11-25T20:28:40"
)
TIMED_OUT = "JobId=2 JobName=job3.sh JobState=COMPLETING Reason=TimeLimit EndTime=2026-11-25T20:30:04"


def _state(record: str) -> JobState:
    return JobState(
        field(record, "JobState") or "", field(record, "Reason"), parse_time(field(record, "EndTime"))
    )


def test_why_slurm_stopped_a_job_is_read_from_the_controllers_record():
    end = parse_time("2026-11-25T20:28:40")
    assert end is not None
    assert why_ended(_state(CANCELLED), end) == "cancelled"
    assert why_ended(_state(TIMED_OUT), end) == "time limit"
    assert why_ended(JobState("CANCELLED", "None", end), end) == "cancelled"
    # The early signal the generated script asks for: two minutes before the end, still running.
    assert why_ended(JobState("RUNNING", "None", end), end - 120) == "time limit"
    assert why_ended(JobState("SIGNALING", "None", end), end - 33) == "time limit"  # as 22.05 says it
    assert why_ended(JobState("RUNNING", "None", end), end - 3600) is None  # a TERM sent by hand
    assert why_ended(None, end) is None  # the controller did not answer
    assert field(CANCELLED, "Dependency") is None and parse_time("Unknown") is None


def test_the_batch_script_runs_one_mgpu_tui_a_node_whose_line_the_cli_reads():
    args = build_parser().parse_args(
        ["slurm", "ddp", "--nodes", "4", "--gpus-per-node", "8", "--partition", "gpu"]
    )
    script = batch_script(args, ["--steps", "1000"])
    lines = script.splitlines()
    assert lines[0] == "#!/bin/bash"
    for option in (
        "--nodes=4",
        "--ntasks-per-node=1",
        "--gpus-per-node=8",
        "--partition=gpu",
        "--signal=TERM@120",
    ):
        assert f"#SBATCH {option}" in lines
    step = next(line for line in lines if line.startswith("srun "))
    words = shlex.split(step.replace('"$SLURM_SUBMIT_DIR/runs"', "/shared/runs"))
    assert words[:4] == ["srun", "mgpu-tui", "run", "ddp"]
    run = build_parser().parse_args(words[2:])  # what every node runs parses as `run`
    assert (run.steps, run.join_timeout, run.run_dir, run.json) == (1000, 608, "/shared/runs", True)
    assert run.nnodes is None and run.node_rank is None and run.rdzv_endpoint is None  # Slurm's to say


def test_the_batch_script_of_a_script_keeps_a_path_with_spaces_whole():
    args = build_parser().parse_args(["slurm", "--script", "my train.py", "--run-dir", "/shared/my runs"])
    step = next(
        line for line in batch_script(args, ["--", "--epochs", "3"]).splitlines() if line.startswith("srun ")
    )
    words = shlex.split(step)
    assert words[3:5] == ["--script", "my train.py"]
    assert words[-5:] == ["--run-dir", "/shared/my runs", "--", "--epochs", "3"]  # the script's own, last


@pytest.mark.parametrize("option", ["--job-name", "--partition", "--account", "--time", "--output"])
def test_an_sbatch_value_with_a_newline_or_a_space_is_refused_in_one_sentence(option):
    """A newline ended the #SBATCH directive and started a line of shell, which sbatch ran (and every
    later #SBATCH was ignored): each value is one word, or a usage error."""
    for hostile in ("gpu\nrm -rf ~", "two words", "x\x1b]0;title\x07"):
        args = build_parser().parse_args(["slurm", "ddp", option, hostile])
        with pytest.raises(UsageError, match=rf"{option} .*one word, with no space or control character"):
            batch_script(args, [])


def test_a_script_whose_name_holds_a_newline_names_its_job_safely_and_stays_one_quoted_word():
    def directives(script: str) -> list[str]:
        """As sbatch reads them: the #SBATCH lines before the first line of shell."""
        found = []
        for line in script.splitlines()[1:]:
            if line.strip() and not line.startswith("#"):
                break
            if line.startswith("#SBATCH"):
                found.append(line)
        return found

    args = build_parser().parse_args(["slurm", "--script", "train\n#SBATCH --nodes=99\n.py"])
    script = batch_script(args, [])
    plain = directives(batch_script(build_parser().parse_args(["slurm", "--script", "train.py"]), []))
    found = directives(script)
    assert found[1:] == plain[1:]  # none added, none lost: the nodes are the job's own
    name = found[0]
    assert " " not in name.removeprefix("#SBATCH ") and "\n" not in name
    step = script[script.index("srun ") :]
    assert shlex.split(step)[3:5] == ["--script", "train\n#SBATCH --nodes=99\n.py"]  # the path, whole
