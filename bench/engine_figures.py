"""telemetry, nccl and memory: the engine's figures, what they cost and how true they are (bench/run.py
says the goals)."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import CLI, table, timed


def bench_telemetry(samples: int, seconds: float) -> str:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from mgpu_tui.engine.machine import nvml
    from mgpu_tui.engine.machine.telemetry import Sampler
    from mgpu_tui.engine.machine.topology import parse_topo_text
    from nvml_standin import machine_from_topology, standin

    fixture = Path(__file__).resolve().parent.parent / "tests/fixtures/topology/h100-sxm-8x-nvswitch.txt"
    machine = machine_from_topology(
        parse_topo_text(fixture.read_text()), "NVIDIA H100 80GB HBM3", 80, nvlink_rate=100 << 30
    )
    nvml.use_library(standin(machine))
    sleepers = [subprocess.Popen(["sleep", "600"]) for _ in range(16)]
    try:
        ranks = {r: (p.pid, machine.gpus[r % 8].uuid) for r, p in enumerate(sleepers)}
        sampler = Sampler(interval=1.0, ranks=lambda: ranks)
        for _ in range(3):
            sampler.sample()  # first samples set up process handles and counters
        start = time.process_time()
        for _ in range(samples):
            snap = sampler.sample()
        per_sample_ms = (time.process_time() - start) / samples * 1000
        assert len(snap.gpus) == 8 and len(snap.ranks) == 16

        sampler.start()
        start_cpu, start_wall = time.process_time(), time.monotonic()
        time.sleep(seconds)
        share = (time.process_time() - start_cpu) / (time.monotonic() - start_wall) * 100
        sampler.stop()
    finally:
        for p in sleepers:
            p.kill()
            p.wait()
        nvml.use_library(None)
    rows = [
        ["one sample: 8 GPUs + host + 16 processes", f"{per_sample_ms:.2f} ms CPU", "<= 5 ms"],
        [f"sampling at 1 Hz for {seconds:.0f} s", f"{share:.2f}% of a core", "<= 1%"],
    ]
    return "telemetry cost (NVML stand-in)\n" + table(["what", "measured", "goal"], rows)


MEMORY_MODEL = [
    *("--model", "custom", "--layers", "4", "--d-model", "512", "--heads", "8"),
    *("--seq-len", "128", "--vocab", "8192"),
]


def bench_memory(batches: tuple[int, ...] = (8, 32)) -> str:
    """The plan's peak against the live tensors' peak the ranks measured, per mode and batch."""
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for mode in ("ddp", "fsdp"):
            for batch in batches:
                argv = [CLI, "run", mode, "--nproc", "2", "--steps", "4", "--device", "cpu", *MEMORY_MODEL]
                argv += ["--batch-size", str(batch), "--json", "--run-dir", work]
                _, done = timed(argv)
                if done.returncode != 0:
                    raise SystemExit(f"run exited {done.returncode}: {done.stderr[-500:]}")
                memory = json.loads(done.stdout.strip().splitlines()[-1])["memory"]
                top = max(memory, key=lambda m: m["tensor_peak_bytes"])
                measured, planned = top["tensor_peak_bytes"], top["predicted_total_bytes"]
                off = planned / measured - 1
                verdict = "ok" if 0 <= off <= 0.10 else "MISSED"
                rows.append(
                    [
                        mode,
                        str(batch),
                        f"{measured / 2**20:,.1f} MiB",
                        f"{planned / 2**20:,.1f} MiB",
                        f"{100 * off:+.1f}%",
                        f"{top['peak_bytes'] / 2**20:,.0f} MiB",
                        verdict,
                    ]
                )
    return (
        "the plan's peak against the live tensors' (21M-parameter GPT, 2 CPU ranks); goal: within 10%, "
        "never below\n"
        + table(["mode", "batch", "tensors at peak", "plan", "plan off", "process (RSS)", "goal"], rows)
    )


NCCL_SCRIPT = """
import resource, sys, time
from mgpu_tui.engine.machine.nccl_log import read_nccl_log
started = time.perf_counter()
with open(sys.argv[1], encoding="utf-8", errors="replace") as f:
    reading = read_nccl_log(f)
took = time.perf_counter() - started
print(reading.lines, took, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
"""


def bench_nccl(megabytes: int) -> str:
    """``read_nccl_log`` over ``megabytes`` of NCCL_DEBUG=INFO output: the recorded H100 log's lines,
    written again and again as new processes and communicators (a new pid and comm every 300 lines,
    a rank's start-up), read line by line as a file streams them."""
    source = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "nccl"
    lines = [
        line
        for path in sorted(source.glob("*.log"))
        for line in path.read_text(errors="replace").splitlines(keepends=True)
    ]
    with tempfile.TemporaryDirectory() as work:
        log = Path(work) / "nccl.log"
        written, copy = 0, 0
        with open(log, "w") as f:
            while written < megabytes << 20:
                copy += 1
                text = "".join(lines).replace(":", f":{copy}", 1)  # another process's start-up
                text = text.replace("comm 0x", f"comm 0x{copy:x}")
                f.write(text)
                written += len(text)
        done = subprocess.run(
            [sys.executable, "-c", NCCL_SCRIPT, str(log)], capture_output=True, text=True, check=True
        )
        count, took, peak = done.stdout.split()
    rows = [
        (f"read_nccl_log, {written / 2**20:.0f} MiB ({int(count):,} lines)", f"{float(took):.1f} s"),
        ("  its process's peak memory (RSS)", f"{int(peak) / 2**20:.0f} MiB"),
    ]
    return table(("nccl: a large log (goal: linear; 100 MiB < 60 s, < 500 MiB)", "measured"), rows)
