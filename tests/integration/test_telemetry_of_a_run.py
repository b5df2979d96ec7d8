"""The sampler on a real run's rank processes: found through the run, measured, gone when it ends."""

import time

from waiting import wait_until

from mgpu_tui.engine.launch.spec import LaunchSpec
from mgpu_tui.engine.machine.telemetry import Sampler
from mgpu_tui.engine.run.lifecycle import Run


def test_ranks_of_a_real_cpu_run_show_their_processes(tmp_path):
    run = Run.prepare(LaunchSpec("ddp", nproc=2, steps=100_000, device="cpu", run_root=tmp_path))
    sampler = Sampler(ranks=run.rank_processes)
    with run:
        run.start()
        wait_until(lambda: run.poll() and len(run.rank_processes()) >= 2, 60, every=0.2)
        first = sampler.sample().ranks
        time.sleep(0.5)
        ranks = sampler.sample().ranks
        run.stop()
    assert [r.rank for r in ranks] == [0, 1]
    assert [r.cpu_percent for r in first] == [None, None]  # seen once: no share of time measured yet
    for r in ranks:
        assert r.alive and r.rss_bytes > 10 << 20 and r.threads >= 1 and r.cpu_percent > 0
        assert r.gpu_uuid is None  # CPU ranks have no GPU
    after = sampler.sample().ranks
    assert not any(r.alive for r in after)


def test_a_run_on_a_busy_machine_says_its_timings_are_not_to_be_trusted(tmp_path):
    import subprocess
    import sys

    from conftest import only_run_dir, read_summary, run_cli

    # Another job on the machine: a process that spins a core for the whole run.
    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        # Sampled 5 times a second, over about 3 s of steps: the rank's CPU is known from its second
        # sample after its hello (a shorter run, on a loaded machine, may end before: n/a, not busy).
        sampled = ("--steps", "600", "--sample-interval", "0.2", "--device", "cpu")
        result = run_cli("run", "single", *sampled, "--run-dir", str(tmp_path))
    finally:
        burner.kill()
        burner.wait()
    assert result.returncode == 0, result.stderr
    assert "BUSY MACHINE: other processes used " in result.stdout
    telemetry = read_summary(only_run_dir(tmp_path) / "summary.json").telemetry
    assert telemetry is not None and telemetry.cores and telemetry.others_cpu_cores >= 0.5
