"""Ranks are untrusted: scripts that lie, hide, hang, stop, fill the disk or outlive their run.

Each test is one of the cases of the trust issue (#16), with real torchrun launches of
scripts that misbehave on purpose. A script writes its events by hand where it must lie
(the reporter would not), through ``MGPU_RUN_DIR`` as the reporter does.
"""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest
from waiting import wait_until

from conftest import CLI, live_processes_of, only_run_dir, run_cli, summary_from

# Writes one event line into any rank's file: what a hostile rank can do.
EMIT = """
    import json, os, time
    RUN_DIR = os.environ["MGPU_RUN_DIR"]
    RANK = int(os.environ["RANK"])

    def emit(file_rank, kind, **fields):
        os.makedirs(f"{RUN_DIR}/events", exist_ok=True)
        with open(f"{RUN_DIR}/events/rank{file_rank}.jsonl", "a") as f:
            f.write(json.dumps({"v": 1, "kind": kind, "t": time.time(), **fields}) + "\\n")

    def hello(pid, rank=None, world_size=2, stacks=True):
        emit(RANK, "hello", rank=RANK if rank is None else rank, local_rank=RANK, world_size=world_size,
             pid=pid, host="h", device="cpu", device_uuid=None, mode="script", config={}, stacks=stacks)

    def step(n, rank=None, file_rank=None, samples=8, loss=1.0):
        emit(RANK if file_rank is None else file_rank, "step", rank=RANK if rank is None else rank,
             step=n, samples=samples, tokens=0, loss=loss, step_s=0.01, mem_bytes=1, mem_peak_bytes=1)
"""


def script(tmp_path: Path, body: str, *, emit: bool = False) -> Path:
    path = tmp_path / "job.py"
    path.write_text(textwrap.dedent(EMIT if emit else "") + textwrap.dedent(body))
    return path


def run_script(path: Path, runs_root: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """The job bare (--no-instrument): its hand-written events are all the engine hears of it, as a
    hostile rank's would be; the bootstrap's own hello would come first and take the rank's pid."""
    return run_cli(
        "run",
        "--no-instrument",
        "--script",
        str(path),
        "--nproc",
        "2",
        "--run-dir",
        str(runs_root),
        "--json",
        *args,
        cwd=path.parent,
        timeout=timeout,
    )


def describe(pid: int) -> str:
    """A process as a failed assertion should name it: its state, parent and command line."""
    try:
        proc = psutil.Process(pid)
        return f"{pid} {proc.status()} ppid={proc.ppid()} {' '.join(proc.cmdline())[:120]}"
    except psutil.Error as exc:
        return f"{pid} ({exc})"


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


# ---- 1, 12: a rank's word about processes and ranks is not believed --------------------------


def test_a_rank_naming_another_process_and_phantom_ranks_changes_nothing(tmp_path, runs_root):
    """A hello that names an unrelated process (whose SIGUSR2 default action would kill it),
    a second hello, phantom ranks in their own files and in another's: the stall watch fires
    and stops the run, the bystander lives, and the summary holds the job's two ranks only."""
    bystander = subprocess.Popen(["sleep", "300"])
    try:
        job = script(
            tmp_path,
            f"""
            hello(pid={bystander.pid})
            hello(pid=1)                                  # a second hello: pid 1 as rank 0
            for n in range(1, 4):
                step(n)
            step(10**6, rank=7, file_rank=7, samples=10**9, loss=-5.0)   # a phantom rank's file
            step(10**6, rank=10**12, samples=10**9)       # a rank no job has
            step(10**6, rank=1 - RANK, samples=10**9)     # the other rank, in this rank's file
            emit(9, "hello", rank=9, local_rank=0, world_size=10, pid=1, host="h", device="cpu",
                 device_uuid=None, mode="x", config={{}}, stacks=True)
            time.sleep(120)                               # then silence: a stall
        """,
            emit=True,
        )
        result = run_script(job, runs_root, "--stall-timeout", "3", "--on-stall", "stop")
        assert alive(bystander.pid), "a process named by a rank was signalled"
    finally:
        bystander.kill()
        bystander.wait()
    assert result.returncode == 1, result.stderr
    summary = summary_from(result.stdout)
    assert summary.root_cause.message.startswith("stalled: no progress for 3 s")
    assert [r.rank for r in summary.ranks] == [0, 1]
    assert summary.world_size == 2
    assert summary.steps == 3 and summary.final_loss == 1.0  # the phantoms moved nothing
    assert all(r.pid is None for r in summary.ranks)  # no hello named a process of the run
    # Per rank: its second hello, the step of rank 10**12, the step written as the other rank.
    # The files of ranks 7 and 9 are no rank's of this job: never read.
    assert summary.malformed_events == 2 * 3
    assert (
        "not read: event files of 2 rank(s) outside the job's 0..1 (rank7, rank9)"
        in (only_run_dir(runs_root) / "mgpu-tui.log").read_text()
    )
    assert live_processes_of(only_run_dir(runs_root)) == []


# ---- 3: the stall watch never kills a rank ----------------------------------------------------


def test_a_slow_run_with_on_stall_report_is_not_killed_and_a_finished_rank_survives_it(tmp_path, runs_root):
    """Rank 0 finishes, closes its reporter and waits (a final barrier); rank 1 goes silent
    past the stall timeout, then finishes. Only rank 1 is asked for its stacks; both succeed."""
    job = script(
        tmp_path,
        """
        import os, time
        from mgpu_tui.engine.rank.reporter import Reporter
        rank = int(os.environ["RANK"])
        reporter = Reporter()
        reporter.hello(mode="script", device="cpu")
        for step in range(1, 4):
            reporter.step(step, samples=4, loss=1.0)
            time.sleep(0.05)
        if rank == 1:
            time.sleep(7)                       # slow, not hung: silent past the 2 s timeout
            reporter.step(4, samples=4, loss=1.0)
        reporter.done(4 if rank == 1 else 3)
        reporter.close()
        time.sleep(8 if rank == 0 else 0)       # rank 0 in its "final barrier", no handler left
        print(f"rank {rank} finished", flush=True)
    """,
    )
    result = run_script(job, runs_root, "--stall-timeout", "2", "--on-stall", "report")
    assert result.returncode == 0, result.stdout + result.stderr
    run_dir = only_run_dir(runs_root)
    log = (run_dir / "mgpu-tui.log").read_text()
    assert "stalled: rank 1" in log
    outputs = sorted(p.read_text() for p in run_dir.glob("logs/*/attempt_0/*/stdout.log"))
    assert [o.splitlines()[-1] for o in outputs] == ["rank 0 finished", "rank 1 finished"]
    answer = (run_dir / "stacks" / "rank1.txt").read_text()
    assert answer.startswith("main thread 0x") and "in <module>" in answer  # it answered, main thread named
    assert not (run_dir / "stacks" / "rank0.txt").exists()  # its reporter was closed: it could not be asked


# ---- 4: one absurd line is one malformed line ------------------------------------------------


def test_a_step_of_2_to_the_63_is_a_malformed_line_not_the_end_of_the_run(tmp_path, runs_root):
    job = script(
        tmp_path,
        """
        hello(pid=os.getpid())
        step(1)
        step(2**63)                   # json writes it; no 64-bit counter takes it
        emit(RANK, "step", rank=RANK, step=3, samples=1e400, tokens=0, loss=None, step_s=0.1)
        step(2)
        emit(RANK, "done", rank=RANK, steps=2)
    """,
        emit=True,
    )
    result = run_script(job, runs_root)
    assert result.returncode == 0, result.stderr
    summary = summary_from(result.stdout)
    assert summary.status == "ok" and summary.steps == 2
    assert summary.malformed_events == 4  # two per rank
    assert "Traceback" not in result.stderr


# ---- 2, 11: a rank's words are text; the root cause says what happened -------------------------


def test_terminal_escapes_in_a_ranks_exception_never_reach_the_terminal(tmp_path, runs_root):
    job = script(
        tmp_path,
        """
        import os
        if os.environ["RANK"] == "1":
            raise RuntimeError("\\x1b]0;pwned\\x07\\x1b[2J\\x1b[31mboom")
    """,
    )
    result = run_script(job, runs_root)
    assert result.returncode == 1
    assert "\x1b" not in result.stderr + result.stdout and "\x07" not in result.stderr
    assert "RuntimeError: ^[]0;pwned^G^[[2J^[[31mboom" in result.stderr
    assert summary_from(result.stdout).root_cause.rank == 1


def test_a_stopped_rank_is_named_as_the_stall_and_its_missing_stacks_explained(tmp_path, runs_root):
    """Rank 1 is SIGSTOPped after step 3; rank 0 waits for it in the next all_reduce."""
    job = script(
        tmp_path,
        """
        import os, signal, torch, torch.distributed as dist
        from mgpu_tui.engine.rank.reporter import Reporter
        dist.init_process_group("gloo")
        rank = dist.get_rank()
        reporter = Reporter()
        reporter.hello(mode="script", device="cpu")
        for step in range(1, 1000):
            if rank == 1 and step == 4:
                os.kill(os.getpid(), signal.SIGSTOP)
            dist.all_reduce(torch.ones(4))
            reporter.step(step, samples=4, loss=1.0)
    """,
    )
    result = run_script(job, runs_root, "--stall-timeout", "3", "--on-stall", "stop")
    assert result.returncode == 1, result.stderr
    cause = summary_from(result.stdout).root_cause
    assert cause.rank == 1
    assert "rank 1 is stopped (SIGSTOP" in cause.message
    assert "--- rank 1 ---\n(no stacks: the process is stopped, so it cannot answer)" in cause.traceback
    assert "all_reduce" in cause.traceback.split("--- rank 0 ---")[1]  # rank 0's own stacks: waiting
    assert "no reporter" not in cause.traceback
    # A stopped process ignores SIGTERM: SIGKILL after the grace ended it (run_script's 120 s would
    # fail a run that waited on it), and nothing of the run is left.
    assert live_processes_of(only_run_dir(runs_root)) == []


def test_a_port_already_in_use_is_named(runs_root):
    holder = socket.socket()
    holder.bind(("0.0.0.0", 0))
    holder.listen()
    port = holder.getsockname()[1]
    try:
        result = run_cli(
            "run",
            "ddp",
            "--nproc",
            "2",
            "--steps",
            "5",
            "--device",
            "cpu",
            "--master-port",
            str(port),
            "--run-dir",
            str(runs_root),
            "--json",
        )
    finally:
        holder.close()
    assert result.returncode == 1, result.stderr
    cause = summary_from(result.stdout).root_cause
    assert f"rendezvous port {port}: it is in use by another process (EADDRINUSE)" in cause.message, cause


# ---- 5: a full disk ---------------------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path):
    """A tmpfs of 24 MiB, mounted for this test (root can; CI runs as root)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(mount)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=True)


def fill(path: Path, leave_bytes: int) -> None:
    """Fill the disk that holds ``path`` until ``leave_bytes`` are left."""
    st = os.statvfs(path)
    size = st.f_bavail * st.f_frsize - leave_bytes
    with open(path / "filler", "wb") as f:
        f.write(b"\0" * max(0, size))


def test_a_disk_too_full_to_start_is_one_sentence_and_exit_2(small_disk):
    fill(small_disk, 1 << 20)
    result = run_cli(
        "run", "ddp", "--nproc", "2", "--steps", "5", "--device", "cpu", "--run-dir", str(small_disk / "runs")
    )
    assert result.returncode == 2, result.stderr
    assert "KiB free; a run needs at least 8 MiB for its logs." in result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert list((small_disk / "runs").iterdir()) == []  # nothing half-made left


def test_a_disk_that_fills_during_the_run_stops_it_cleanly(small_disk, tmp_path):
    job = script(
        tmp_path,
        f"""
        import os, time
        from mgpu_tui.engine.rank.reporter import Reporter
        reporter = Reporter()
        reporter.hello(mode="script", device="cpu")
        for step in range(1, 100000):
            reporter.step(step, samples=4, loss=1.0)
            if step == 20 and os.environ["RANK"] == "0":
                st = os.statvfs("{small_disk}")
                with open("{small_disk}/checkpoint.bin", "wb") as f:   # a checkpoint too big
                    f.write(b"\\0" * (st.f_bavail * st.f_frsize - (2 << 20)))
            time.sleep(0.01)
    """,
    )
    result = run_script(job, small_disk / "runs")
    assert result.returncode == 1, result.stderr
    summary = summary_from(result.stdout)
    assert summary.status == "failed"
    assert summary.root_cause.message.startswith("the disk that holds the run directory is full")
    assert "Traceback" not in result.stderr
    run_dir = only_run_dir(small_disk / "runs")
    assert list(run_dir.rglob("*.tmp")) == []
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "failed"  # room was kept for it
    assert live_processes_of(run_dir) == []


def test_a_check_report_that_cannot_be_written_fails_the_check(small_disk, runs_root):
    fill(small_disk, 0)
    result = run_cli(
        "--check",
        "--level",
        "1",
        "--json",
        str(small_disk / "report.json"),
        "--run-dir",
        str(runs_root),
        timeout=300,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"cannot write {small_disk / 'report.json'}: No space left on device." in result.stderr
    assert not list(small_disk.glob("*.tmp")) and not list(small_disk.glob(".report*"))


# ---- 7, 13: stopping owns the whole tree -------------------------------------------------------


def test_a_rank_that_ignores_sigterm_is_gone_within_seconds_of_a_failure(tmp_path, runs_root):
    job = script(
        tmp_path,
        """
        import os, signal, time
        from mgpu_tui.engine.rank.reporter import Reporter
        reporter = Reporter()
        reporter.hello(mode="script", device="cpu")
        if os.environ["RANK"] == "1":
            signal.signal(signal.SIGTERM, signal.SIG_IGN)   # as many frameworks do
            while True:
                time.sleep(1)
        time.sleep(1)
        raise SystemExit("rank 0 gives up")
    """,
    )
    result = run_script(job, runs_root)
    ended = time.time()
    assert result.returncode == 1, result.stderr
    assert summary_from(result.stdout).root_cause.rank == 0
    run_dir = only_run_dir(runs_root)
    # Rank 0 gave up a second after its hello; torchrun alone SIGKILLs rank 1 30 s after that. The
    # engine kills it itself after its 5 s grace (its log says so): about 6 s from the failure on an
    # idle machine, 30 s the line that tells the two apart (from the failure, so a slow launch on a
    # busy machine does not count).
    hello = json.loads((run_dir / "events" / "rank0.jsonl").read_text().splitlines()[0])
    assert ended - (hello["t"] + 1) < 30, ended - hello["t"]
    assert re.search(
        r"5 s after a rank failed, 1 process\(es\) still ran: killed", (run_dir / "mgpu-tui.log").read_text()
    )
    log = (run_dir / "mgpu-tui.log").read_text()
    assert "s after a rank failed, 1 process(es) still ran: killed" in log
    assert live_processes_of(run_dir) == []


GRANDCHILD = """
    import os, subprocess, sys, time
    from mgpu_tui.engine.rank.reporter import Reporter
    reporter = Reporter()
    reporter.hello(mode="script", device="cpu")
    if os.environ["RANK"] == "0":
        # Its own session, no environment at all (no MGPU_RUN_ID): nothing ties it to the run
        # but its ancestry.
        child = subprocess.Popen(["sleep", "300"], env={}, start_new_session=True)
        open("grandchild.pid", "w").write(str(child.pid))
    for step in range(1, 100000 if "forever" in sys.argv else 5):
        reporter.step(step, samples=4, loss=1.0)
        time.sleep(0.05)
    reporter.done(4)
"""


def test_a_grandchild_in_its_own_session_without_the_runs_environment_ends_with_the_run(tmp_path, runs_root):
    job = script(tmp_path, GRANDCHILD)
    result = run_script(job, runs_root)
    assert result.returncode == 0, result.stderr
    pid = int((tmp_path / "grandchild.pid").read_text())
    assert not alive(pid)


def test_killing_mgpu_tui_itself_leaves_nothing_of_the_run(tmp_path, runs_root):
    job = script(tmp_path, GRANDCHILD)
    proc = subprocess.Popen(
        [*CLI, "run", "--script", str(job), "--nproc", "2", "--run-dir", str(runs_root), "--", "forever"],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    marker = tmp_path / "grandchild.pid"
    assert wait_until(lambda: marker.exists() and marker.read_text(), 90, every=0.2), "the run never started"
    time.sleep(1)
    run_dir = only_run_dir(runs_root)
    ranks = [
        json.loads(line)["pid"]
        for p in (run_dir / "events").glob("rank*.jsonl")
        for line in p.read_text().splitlines()[:1]
    ]
    assert len(ranks) == 2 and all(alive(pid) for pid in ranks)
    proc.kill()  # SIGKILL: no handler of ours runs
    proc.wait()
    grandchild = int(marker.read_text())
    # The keeper's grace for the launcher is 5 s; a loaded machine (the suite runs two workers on
    # two cores) may take a few more to schedule the keeper, torchrun and the ranks' exits.
    wait_until(
        lambda: not any(alive(pid) for pid in [*ranks, grandchild]) and not live_processes_of(run_dir),
        20,
        every=0.2,
    )
    left = [describe(pid) for pid in [*ranks, grandchild] if alive(pid)]
    assert not left, left
    assert live_processes_of(run_dir) == []


def test_ctrl_c_stops_a_rank_that_ignores_sigterm_and_sigint_within_seconds(tmp_path, runs_root):
    job = script(
        tmp_path,
        """
        import signal, time
        from mgpu_tui.engine.rank.reporter import Reporter
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        reporter = Reporter()
        reporter.hello(mode="script", device="cpu")
        for step in range(1, 100000):
            reporter.step(step, samples=4, loss=1.0)
            time.sleep(0.05)
    """,
    )
    proc = subprocess.Popen(
        [*CLI, "run", "--script", str(job), "--nproc", "2", "--run-dir", str(runs_root)],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )

    def both_stepping() -> bool:
        files = list(runs_root.glob("*/events/rank*.jsonl"))
        return len(files) == 2 and all(len(f.read_text().splitlines()) > 2 for f in files)

    wait_until(both_stepping, 90, every=0.2)
    proc.send_signal(signal.SIGINT)
    # The grace (5 s), then SIGKILL: ranks that ignore both signals would otherwise run for ever (the
    # wait's 60 s fails that); how soon on an idle machine is the grace's length, said in the log.
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "SIGKILL after 5 s" in (only_run_dir(runs_root) / "mgpu-tui.log").read_text()
    assert live_processes_of(only_run_dir(runs_root)) == []


LAUNCHER_WITH_A_DETACHED_CHILD = """
import subprocess, sys, time
child = subprocess.Popen(["sleep", "300"], env={}, start_new_session=True)
open(sys.argv[1], "w").write(str(child.pid))
time.sleep(300)
"""


def test_the_keeper_ends_the_whole_run_however_many_stop_signals_arrive_meanwhile(tmp_path):
    """mgpu-tui's stop, the parent-death signal and a user's kill may all reach the keeper, in any
    order and at any moment, also while it is already ending the run: a stop may never interrupt
    that (CI once saw a detached grandchild outlive its run). The keeper is started bare, so the
    signals reach it, and only it, as fast as they can be sent."""
    marker = tmp_path / "child.pid"
    keeper = subprocess.Popen(
        [sys.executable, "-m", "mgpu_tui.engine.launch.keeper", "--grace", "0.3", "--"]
        + [sys.executable, "-c", LAUNCHER_WITH_A_DETACHED_CHILD, str(marker)],
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    deadline = time.monotonic() + 30
    wait_until(lambda: marker.exists() and marker.read_text(), 30, every=0.05)
    child = int(marker.read_text())
    while keeper.poll() is None and time.monotonic() < deadline:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            try:
                os.kill(keeper.pid, sig)
            except ProcessLookupError:
                break
        time.sleep(0.001)
    _, stderr = keeper.communicate(timeout=30)
    end = time.monotonic() + 5
    while alive(child) and time.monotonic() < end:
        time.sleep(0.05)
    assert not alive(child), describe(child)
    assert "Traceback" not in stderr, stderr
    assert keeper.returncode == -signal.SIGTERM  # the launcher's own end, passed on


@pytest.mark.parametrize("name", ["train\n#SBATCH --nodes=99\n.py", "my train.py", "it's $(touch x).py"])
def test_the_batch_script_of_any_script_name_is_shell_that_bash_reads_as_written(name):
    """Issue #40: a space in the script's name gave a batch script sbatch refused; a newline added an
    #SBATCH line. The script `mgpu-tui slurm` writes parses (bash -n: sbatch's shell, reading)."""
    from mgpu_tui.commands.launchers.slurm import batch_script
    from mgpu_tui.parser import build_parser

    script = batch_script(build_parser().parse_args(["slurm", "--script", name]), ["--", "it's"])
    parsed = subprocess.run(["bash", "-n"], input=script, capture_output=True, text=True)
    assert parsed.returncode == 0, parsed.stderr
