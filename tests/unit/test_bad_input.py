"""Bad input, table-driven: each case is one clear sentence and its documented exit code, never a traceback.

The cases run `mgpu_tui.cli.main` in this process (an exception escaping it
fails the test as surely as a traceback on a terminal would), against the real
engine: nothing is launched because every case is refused first.
"""

import os

import pytest

from mgpu_tui.cli import main
from mgpu_tui.engine.protocol.events import MAX_LINE_BYTES, MalformedEvent, parse_line

USAGE, FAILED = 2, 1


@pytest.fixture
def files(tmp_path):
    (tmp_path / "not-topology.txt").write_text("GPU0 is fine\nthis is not a matrix\n")
    (tmp_path / "a-folder").mkdir()
    (tmp_path / "a-file").write_text("x")
    (tmp_path / "train.py").write_text("print('hi')\n")
    (tmp_path / "dangling").symlink_to("/nonexistent-runs-target")
    os.mkfifo(tmp_path / "a-fifo")  # no one writes it: opening it would block for ever
    (tmp_path / "huge.txt").write_bytes(b"GPU0\t" * (512 * 1024))  # 2.5 MiB
    return tmp_path


CASES = [
    # numbers past what any machine can mean (issue #28): refused at the door, not hours later
    (["plan", "--gpus", "1000000000"], "--gpus: must be at most 16,384, got 1,000,000,000"),
    (["plan", "--gpus", "8", "--layers", "10000000"], "--layers: must be at most 1,024"),
    (["plan", "--gpus", "8", "--layers", "1e32"], "--layers: must be a whole number, got '1e32'"),
    (["plan", "--gpus", "8", "--gpu-mem", "1e308"], "--gpu-mem: must be at most 1e+09, got 1e308"),
    (["run", "ddp", "--join-timeout", "1e308"], "--join-timeout: must be at most 1e+09"),
    (["run", "ddp", "--batch-size", "1" + "0" * 22], "--batch-size: must be at most 16,777,216"),
    (["run", "ddp", "--steps", "1" + "0" * 20], "--steps: must be at most 1,000,000,000"),
    (["run", "ddp", "--width", "1000000000"], "--width: must be at most 65,536"),
    (["scale", "ddp", "--nproc", "1," + "9" * 30], "--nproc: must be whole numbers separated by commas"),
    (["scale", "ddp", "--nproc", "2", "--batch-size", "64,99999999"], "each must be at most 16,777,216"),
    # a typo gets the nearest names (issue #31)
    (["run", "ddp", "--nprocs", "2"], "unknown option(s): --nprocs 2 (did you mean --nproc?)"),
    (["run", "dpp"], "unknown mode 'dpp'; did you mean 'dp' or 'ddp'? the modes are:"),
    (["compare", "ddp", "fdsp"], "unknown mode 'fdsp'; did you mean 'fsdp'?"),
    (["run", "zzz"], "unknown mode 'zzz'; the modes are:"),
    # a job id names the nodes' shared folder: a name, never a path out of --run-dir
    (["run", "ddp", "--rdzv-id", "../../etc"], "--rdzv-id: must be a name of letters, digits"),
    (["run", "ddp", "--rdzv-id", "a/b"], "--rdzv-id: must be a name of letters, digits"),
    # run: numbers of the wrong type or range
    (["run", "ddp", "--nproc", "zero"], "--nproc: must be a whole number, got 'zero'"),
    (["run", "ddp", "--nproc", "0"], "--nproc: must be at least 1, got 0"),
    (["run", "ddp", "--nproc", "-1"], "--nproc: must be at least 1, got -1"),
    (["run", "ddp", "--steps", "1.5"], "--steps: must be a whole number, got '1.5'"),
    (["run", "ddp", "--steps", "0"], "--steps: must be at least 1"),
    (["run", "ddp", "--batch-size", "lots"], "--batch-size: must be a whole number"),
    (["run", "ddp", "--accum", "0"], "--accum: must be at least 1"),
    (["run", "ddp", "--lr", "fast"], "--lr: must be a number, got 'fast'"),
    (["run", "ddp", "--stall-timeout", "-1"], "--stall-timeout: must be more than 0, got -1"),
    (["run", "ddp", "--stall-timeout", "nan"], "--stall-timeout: must be a finite number, got 'nan'"),
    (["run", "ddp", "--lr", "inf"], "--lr: must be a finite number, got 'inf'"),
    (["run", "ddp", "--lr", "0"], "--lr: must be more than 0, got 0"),
    (["run", "ddp", "--seed", str(2**40)], "--seed: must be at most 4,294,967,295"),
    (["run", "ddp", "--device", "cpu", "--nproc", "100000"], "would start 100000 processes on"),
    (
        ["run", "ddp", "--nnodes", "2", "--rdzv-endpoint", "no-such-host.invalid:29400"],
        "--rdzv-endpoint: the host 'no-such-host.invalid' cannot be resolved",
    ),
    (["run", "ddp", "--master-port", "70000"], "--master-port must be between 1 and 65535"),
    (["run", "ddp", "--nice", "20"], "--nice must be between 0 and 19, got 20"),
    (["run", "ddp", "--nice", "-5"], "--nice: must be at least 0, got -5"),
    # run: choices, modes, flags
    (["run", "ddp", "--device", "tpu"], "--device: invalid choice: 'tpu'"),
    (["run", "ddp", "--device", "cuda"], "--device cuda needs an NVIDIA GPU"),
    (["run", "ddp", "--on-stall", "maybe"], "--on-stall: invalid choice: 'maybe'"),
    (["run", "nosuchmode"], "unknown mode 'nosuchmode'"),
    (["run"], "give a MODE, --script PATH or --module NAME"),
    (["run", "ddp", "--bogus"], "unknown option(s): --bogus"),
    (["run", "ddp", "--schedule", "1f1b"], "--schedule applies to mode pipeline only"),
    (["run", "single", "--nproc", "2"], "runs as one process"),
    (["run", "rpc", "--nproc", "1", "--device", "cpu"], "needs at least 2 ranks"),
    (["run", "ddp", "--nproc", "3", "--device", "cpu"], "does not split evenly over 3 ranks"),
    (["run", "pipeline", "--microbatches", "5", "--device", "cpu"], "does not split into 1 x 5"),
    (["run", "mp", "--stages", "9", "--device", "cpu"], "9 stages is more than the model's 5 layers"),
    (["run", "ddp", "--json", "--tui"], "--json and --tui do not go together"),
    # run: several nodes
    (["run", "ddp", "--nnodes", "2"], "several nodes need --rdzv-endpoint HOST:PORT"),
    (
        ["run", "ddp", "--nnodes", "2", "--node-rank", "2", "--rdzv-endpoint", "h:29400"],
        "--node-rank must be",
    ),
    (["run", "ddp", "--nnodes", "2", "--rdzv-endpoint", "nohost"], "--rdzv-endpoint must be HOST:PORT"),
    # run: scripts and paths
    (["run", "--script", "/nonexistent.py"], "no such script: /nonexistent.py"),
    (["run", "--script", "{dir}/a-folder"], "no such script"),
    (["run", "--script", "{dir}/train.py", "--module", "x"], "exactly one of them"),
    (["run", "--module", "not a module"], "is not a Python module name"),
    (["run", "--script", "{dir}/train.py", "--verify"], "--verify are for the modes"),
    (["run", "ddp", "--device", "cpu", "--run-dir", "{dir}/a-file/runs"], "cannot create a run directory"),
    (["run", "ddp", "--device", "cpu", "--run-dir", "/proc/mgpu-runs"], "cannot create a run directory"),
    (
        ["run", "ddp", "--device", "cpu", "--run-dir", "{dir}/dangling"],
        "dangling is a symbolic link to /nonexistent-runs-target, which does not exist.",
    ),
    (
        ["run", "ddp", "--device", "cpu", "--run-dir", "{dir}/a-file"],
        "a-file is a file, not a folder for runs.",
    ),
    # other commands
    (["nosuchcommand"], "invalid choice: 'nosuchcommand'"),
    (["list", "--json", "--", "x"], "arguments after -- are only for `mgpu-tui run`"),
    (["topo", "--from-file", "/nonexistent"], "cannot read /nonexistent"),
    (["topo", "--from-file", "{dir}/not-topology.txt"], "not-topology.txt: "),
    (["topo", "--from-file", "{dir}/a-folder"], "is not a regular file"),
    (["topo", "--from-file", "/dev/zero"], "is not a regular file"),  # would read without end
    (["topo", "--from-file", "{dir}/a-fifo"], "a-fifo is not a regular file"),  # would block
    (["topo", "--from-file", "{dir}/huge.txt"], "huge.txt is over 1024 KiB; that is not output of"),
    (["runs", "--run-dir", "{dir}/a-file"], "a-file is a file, not a folder of runs."),
    (["run", "ddp", "--sample-interval", "0.01"], "--sample-interval: must be 0 or at least 0.1 seconds"),
    (["compare", "ddp", "nosuchmode"], "unknown mode 'nosuchmode'"),
    (["compare"], "give the MODEs to compare, or --runs with the folders of finished runs."),
    (["compare", "ddp", "--runs", "{dir}/a-folder"], "give MODEs to run, or --runs"),
    (
        ["compare", "--runs", "{dir}/a-folder"],
        "a-folder cannot be compared: no spec.json: not a run directory.",
    ),
    (["compare", "ddp", "ddp"], "a mode is named twice"),
    (["nccl", "{dir}/no-such-log"], "cannot read"),
    (["run", "--script", "{dir}/train.py", "--ranks-filter", "one"], "--ranks-filter: give rank numbers"),
    (["run", "--script", "{dir}/train.py", "--ranks-filter", "1", "--quiet"], "not allowed with"),
    (["nccl", "{dir}/a-fifo"], "a-fifo is not a regular file; give the saved NCCL_DEBUG=INFO output."),
    (["nccl", "{dir}/train.py", "--topo", "{dir}/not-topology.txt"], "not-topology.txt:"),
    (["open", "{dir}/no-such-run"], "no-such-run does not exist: give a run folder, its name in runs"),
    (["open", "{dir}/a-file"], "a-file is not a folder: give a run folder, its name in runs (as"),
    (["open", "no-such-run"], "no-such-run does not exist: give a run folder, its name in runs"),
    # Issue 56: a path that does not exist is said as such, not as a folder without its spec.json.
    (["compare", "--runs", "runs/nope"], "runs/nope does not exist: give the folders of finished runs"),
    (["compare", "--runs", "{dir}/a-file"], "a-file is not a folder: give the folders of finished runs"),
    # Issue 56: a missing script, before anything starts (no run folder), as python would say it after.
    (["exec", "--", "python", "nope.py"], "nope.py: no such file, so python cannot run it."),
    (["exec", "--", "python3", "-u", "-W", "ignore", "nope.py", "--x"], "nope.py: no such file, so python3"),
    (["open", "{dir}/a-folder"], "a-folder cannot be opened: no spec.json: not a run directory."),
    (["open", "latest", "--run-dir", "{dir}/a-folder"], "there is no run under"),
    (["open", "latest", "--run-dir", "{dir}/a-file"], "a-file is a file, not a folder of runs."),
    (["compare", "ddp", "--out", "{dir}/r.txt"], "--out must end in .json, .md or .csv"),
    (["compare", "ddp", "--out", "{dir}/a-folder"], "--out must end in"),
    (["compare", "ddp", "--steps", "0"], "--steps: must be at least 1"),
    (["scale", "ddp", "--nproc", "1,x"], "--nproc: must be whole numbers separated by commas"),
    (["scale", "single", "--nproc", "1,2"], "runs as one process"),
    (["scale", "ddp"], "the following arguments are required: --nproc"),
    (["scale", "ddp", "--nproc", "1,2", "--batch-size", "32,64"], "rank counts or the batch sizes, not both"),
    (["scale", "ddp", "--nproc", "2", "--batch-size", "32,64", "--weak"], "sweep --batch-size without it"),
    (["scale", "ddp", "--nproc", "1,2", "--batch-size", "0"], "--batch-size: each must be at least 1"),
    (["scale", "ddp", "--nproc", "1,2", "--lr-rule", "cube"], "--lr-rule: invalid choice"),
    (["scale", "rpc", "--nproc", "2,3", "--warmup-steps", "2", "--device", "cpu"], "it takes no warm-up"),
    (["run", "rpc", "--nproc", "2", "--warmup-steps", "2", "--device", "cpu"], "DistributedOptimizer keeps"),
    # It launched ranks that died on an unknown flag: a mode's own flag, false, was not checked.
    (["run", "ddp", "--no-reshard-after-forward"], "--reshard-after-forward applies to mode fsdp only."),
    (
        ["run", "tp", "--model", "gpt-tiny", "--nproc", "3", "--device", "cpu"],
        "the model's 4 heads must be a multiple",
    ),
    (["scale", "pipeline", "--nproc", "1,2", "--weak"], "pipeline gives every rank the whole batch"),
    (["run", "ddp", "--lr", "-1"], "--lr: must be"),
    (["run", "--script", "{dir}/train.py", "--warmup-steps", "3"], "--warmup-steps are for the modes"),
    (["--check", "--level", "x"], "--level: must be a whole number, got 'x'"),
    (["--check", "--level", "9"], "--level must be 1, 2 or 3, got 9"),
    (["--check", "--junit", "-"], "--junit needs a file name"),
    (["--check", "--json", "{dir}/a-folder"], "is a folder; give a file name"),
    (["--check", "--modes", "ddp,nope"], "unknown mode 'nope'"),
    (["--check", "--model", "gpt-huge"], "unknown model 'gpt-huge'; choose one of gpt-tiny"),
    (["--check", "--model", "gpt-tiny", "--heads", "3"], "--d-model (64) must be a multiple of --heads (3)"),
]


@pytest.mark.parametrize("argv, sentence", CASES, ids=[" ".join(a) for a, _ in CASES])
def test_bad_arguments_are_one_sentence_and_exit_2(argv, sentence, files, capsys, monkeypatch):
    monkeypatch.chdir(files)
    code = main([a.replace("{dir}", str(files)) for a in argv])
    err = capsys.readouterr().err
    assert code == USAGE, err
    assert sentence in err and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1, err  # one sentence, on one line
    assert not (files / "runs").exists()  # nothing was started


# ---- event lines a rank (or anything else) wrote -------------------------------------------

EVENT_LINES = [
    (b'{"v":1,"kind":"step","rank":0,"t":1.0,"step":', "not JSON"),  # truncated
    (b"\x00\xff\xfe binary \x89PNG", "not JSON"),
    (b"[1, 2, 3]", "not a JSON object"),
    (b'{"v":99,"kind":"step"}', "unsupported schema version"),
    (b'{"v":1,"kind":"step","rank":"zero","t":1.0,"step":1}', "field 'rank'"),
    (b"x" * (MAX_LINE_BYTES + 1), "line too long"),
]


@pytest.mark.parametrize(
    "line, reason", EVENT_LINES, ids=["truncated", "binary", "array", "version", "wrong type", "huge"]
)
def test_event_lines_that_are_not_events_are_refused_by_name(line, reason):
    with pytest.raises(MalformedEvent, match=reason):
        parse_line(line)


# ---- NVML raising on every call --------------------------------------------------------------


@pytest.mark.parametrize("argv", [["topo"], ["topo", "--json"], ["list"]])
def test_nvml_raising_on_every_call_is_a_sentence(argv, broken_nvml, capsys):
    code = main(argv)
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err + captured.out
    assert code in (0, 3), captured.err
    if argv[0] == "topo":
        assert "NVML" in captured.out + captured.err


def test_the_sampler_goes_on_when_nvml_raises_on_every_call(broken_nvml):
    from mgpu_tui.engine.machine.telemetry import Sampler

    snapshot = Sampler(interval=1.0).sample()
    assert snapshot.host is not None  # the host is still shown
    assert len(snapshot.gpus) == 2 and all("failed: Unknown Error" in g.error for g in snapshot.gpus)
    assert not any(g.lost for g in snapshot.gpus)


def test_plans_help_offers_only_the_models_plan_takes(capsys):
    """plan refuses mlp, so its --help must not offer it (issue #31); run's offers both."""
    with pytest.raises(SystemExit):
        main(["plan", "--help"])
    offered = capsys.readouterr().out
    assert "gpt-125m" in offered and "mlp" not in offered
    assert main(["plan", "--model", "mlp", "--gpus", "2"]) == USAGE
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    assert "mlp (quickest" in capsys.readouterr().out
