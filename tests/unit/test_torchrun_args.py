"""torchrun's command line read by torchrun's own parser (engine/rank/torchrun_args.py): what is
read out for the launch, what passes to torchrun as given, what mgpu-tui does its own way, and
what is refused in a sentence."""

import pytest

from mgpu_tui.engine.rank import torchrun_args

OURS = [("--json", 0, ""), ("--run-dir", 1, ""), ("--no-instrument", 0, "")]


def read(*argv: str) -> dict:
    return torchrun_args.read(list(argv), OURS)


def test_the_launch_is_read_out_and_the_scripts_own_arguments_are_left_alone():
    got = read("--nproc-per-node", "2", "--json", "--run-dir", "r", "train.py", "--lr", "3", "--json")
    t = got["torchrun"]
    assert (t["program"], t["args"], t["nproc"], t["nnodes"], t["module"]) == (
        "train.py",
        ["--lr", "3", "--json"],
        2,
        1,
        False,
    )
    assert got["ours"] == ["--json", "--run-dir", "r"]  # only the ones before the script
    assert t["master_port"] is None and t["rdzv_id"] is None and t["standalone"] is False


def test_both_spellings_and_pet_variables_mean_what_they_mean_to_torchrun(monkeypatch):
    assert read("--nproc_per_node", "3", "x.py")["torchrun"]["nproc"] == 3
    monkeypatch.setenv("PET_NPROC_PER_NODE", "2")
    monkeypatch.setenv("PET_MAX_RESTARTS", "1")
    t = read("-m", "pkg.train")["torchrun"]
    assert (t["nproc"], t["max_restarts"], t["module"], t["program"]) == (2, 1, True, "pkg.train")


def test_a_kubernetes_pods_torchrun_environment_is_read_as_torchrun_reads_it(monkeypatch):
    """What the Kubeflow training operator's elastic PyTorchJob sets in each pod (PET_*): the
    unchanged `mgpu-tui torchrun train.py` is then one node of the job (docs/multi-node.md)."""
    pod = {
        "PET_NNODES": "2",
        "PET_NODE_RANK": "1",
        "PET_NPROC_PER_NODE": "8",
        "PET_RDZV_BACKEND": "c10d",
        "PET_RDZV_ENDPOINT": "myjob-master-0:29400",
        "PET_RDZV_ID": "myjob",
    }
    for name, value in pod.items():
        monkeypatch.setenv(name, value)
    t = read("train.py")["torchrun"]
    assert (t["nnodes"], t["node_rank"], t["nproc"], t["rdzv_backend"]) == (2, 1, 8, "c10d")
    assert (t["rdzv_endpoint"], t["rdzv_id"], t["program"]) == ("myjob-master-0:29400", "myjob", "train.py")


def test_what_mgpu_tui_does_its_own_way_and_what_it_passes_on():
    got = read(
        "--tee",
        "3",
        "--log-dir",
        "l",
        "--monitor-interval",
        "1",
        "--role",
        "t",
        "--master-port",
        "29511",
        "x.py",
    )
    assert set(got["ignored"]) == {"--log-dir", "--tee"}
    assert got["passthrough"] == ["--monitor-interval", "1.0", "--role", "t"]
    assert got["torchrun"]["master_port"] == 29511


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--nnodes", "1:2", "x.py"], "an elastic range is not supported; give one count (--nnodes 2)"),
        (["--nnodes", "two", "x.py"], "--nnodes must be a number or MIN:MAX"),
        (["--bogus", "x.py"], "unrecognized arguments: --bogus"),
        (["--nproc-per-node", "many", "x.py"], "--nproc-per-node many:"),
    ],
)
def test_what_torchrun_would_refuse_is_one_sentence(argv, words):
    with pytest.raises(torchrun_args._Refused) as refused:
        read(*argv)
    assert words in str(refused.value)


def test_the_drop_in_holds_torchruns_counts_and_join_timeout_to_runs_bounds():
    """torchrun takes --nnodes 1000000000000 (the drop-in then followed that many nodes every poll)
    and --rdzv-conf join_timeout=abc (a traceback): each is one sentence, exit 2, as `run` says it."""
    from mgpu_tui.commands.launchers.torchrun import TorchrunLine, _checked, _within_bounds
    from mgpu_tui.engine.protocol.typed import build
    from mgpu_tui.errors import UsageError

    line = build(TorchrunLine, read("--nnodes", "1000000000000", "x.py")["torchrun"])
    with pytest.raises(UsageError, match=r"^--nnodes must be at most 4,096, got 1,000,000,000,000"):
        _within_bounds(line)
    refused = {"abc": "must be a number", "nan": "must be a finite number", "inf": "must be a finite number"}
    for value, why in {**refused, "": "must be a number", "-1": "must be more than 0"}.items():
        with pytest.raises(UsageError, match=f"^--rdzv-conf join_timeout {why}"):
            _checked("join_timeout", value, "--rdzv-conf join_timeout")
    assert _checked("join_timeout", "90", "--rdzv-conf join_timeout") == 90.0


def test_run_path_is_read_out_not_passed_to_torchrun_under_the_bootstrap(monkeypatch):
    """torchrun --run-path (or PET_RUN_PATH) made torchrun run_path the bootstrap's module name as a
    file: the run failed where plain torchrun ran it. It is read out: the bootstrap runs the script
    as __main__, as run_path would."""
    got = read("--run-path", "--nproc-per-node", "2", "x.py")
    assert got["torchrun"]["run_path"] is True and "--run-path" not in got["passthrough"]
    monkeypatch.setenv("PET_RUN_PATH", "1")
    assert read("x.py")["torchrun"]["run_path"] is True
