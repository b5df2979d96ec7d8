"""topology, telemetry and sampler-cost: what mgpu-tui reads of the machine against nvidia-smi, and
what a sample costs with the real driver."""

from __future__ import annotations

import json
import statistics
import subprocess
import time
from typing import Any

from gpu_checks.base import CheckerBase, Result

# Telemetry against nvidia-smi, read a fraction of a second apart: how far each field may differ.
TOLERANCE = {"memory_used_mib": 256, "util_pct": 15, "temperature_c": 3, "power_w_rel": 0.15}


class MachineChecks(CheckerBase):
    def topology(self) -> Result:
        start = time.monotonic()
        text = subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True).stdout
        saved = self.out / "nvidia-smi-topo.txt"
        saved.write_text(text)
        ours = self.sh("topo-nvml", self.mgpu("topo", "--json"))
        theirs = self.sh("topo-text", self.mgpu("topo", "--from-file", str(saved), "--json"))
        self.sh("topo-table", self.mgpu("topo"))
        try:
            a, b = json.loads(ours.stdout), json.loads(theirs.stdout)
        except ValueError:
            return Result("topology", False, "mgpu-tui topo printed no JSON; see topo-*.log")
        same = a["matrix"] == b["matrix"] and [g["cpu_affinity"] for g in a["gpus"]] == [
            g["cpu_affinity"] for g in b["gpus"]
        ]
        detail = (
            f"{len(a['gpus'])} GPU(s): NVML {a['matrix']} vs nvidia-smi {b['matrix']}; "
            f"affinity {[g['cpu_affinity'] for g in a['gpus']]}; reading: {a['reading']}"
        )
        return Result("topology", same, detail, time.monotonic() - start)

    def telemetry(self) -> Result:
        """Sample NVML (through the app's sampler) and nvidia-smi together, under a matmul load."""
        from mgpu_tui.engine.machine.telemetry import Sampler

        start = time.monotonic()
        load = subprocess.Popen(
            [
                self.python,
                "-c",
                (
                    "import time, torch\n"
                    "keep = torch.empty(6 << 30, dtype=torch.uint8, device='cuda')\n"
                    "a = torch.randn(8192, 8192, device='cuda', dtype=torch.bfloat16)\n"
                    "end = time.time() + 25\n"
                    "while time.time() < end:\n"
                    "    for _ in range(20): a @ a\n"
                    "    torch.cuda.synchronize()\n"
                ),
            ]
        )
        sampler = Sampler(interval=1.0)
        rows: list[dict[str, Any]] = []
        try:
            time.sleep(8)  # the load is up and the power reading has settled
            for _ in range(10):
                smi = subprocess.run(
                    [
                        "nvidia-smi",
                        "--query-gpu=index,memory.used,utilization.gpu,temperature.gpu,power.draw",
                        "--format=csv,noheader,nounits",
                    ],
                    capture_output=True,
                    text=True,
                ).stdout
                snap = sampler.sample()
                for line in smi.strip().splitlines():
                    index, mem, util, temp, power = [v.strip() for v in line.split(",")]
                    r = snap.gpus[int(index)].readings
                    assert r is not None and r.memory_used is not None, f"no NVML readings of GPU {index}"
                    rows.append(
                        {
                            "gpu": int(index),
                            "smi_memory_mib": float(mem),
                            "nvml_memory_mib": r.memory_used / 2**20,
                            "smi_util": float(util),
                            "nvml_util": r.util_gpu,
                            "smi_temp": float(temp),
                            "nvml_temp": r.temperature_c,
                            "smi_power": float(power),
                            "nvml_power": r.power_w,
                        }
                    )
                time.sleep(0.5)
        finally:
            load.kill()
            load.wait()
        (self.out / "telemetry.json").write_text(json.dumps(rows, indent=1))

        def median_diff(a: str, b: str, relative: bool = False) -> float:
            return statistics.median(abs(r[a] - r[b]) / (r[a] if relative else 1) for r in rows)

        diffs = {
            "memory_used_mib": median_diff("smi_memory_mib", "nvml_memory_mib"),
            "util_pct": median_diff("smi_util", "nvml_util"),
            "temperature_c": median_diff("smi_temp", "nvml_temp"),
            "power_w_rel": median_diff("smi_power", "nvml_power", relative=True),
        }
        ok = all(diffs[k] <= TOLERANCE[k] for k in TOLERANCE) and len(rows) >= 10
        detail = (
            "median |NVML - nvidia-smi| over 10 samples under load: "
            + ", ".join(f"{k} {v:.3g} (<= {TOLERANCE[k]})" for k, v in diffs.items())
            + f"; load util {rows[-1]['nvml_util']}%, {rows[-1]['nvml_power']:.0f} W"
        )
        return Result("telemetry", ok, detail, time.monotonic() - start, {"median_diffs": diffs})

    def sampler_cost(self) -> Result:
        from mgpu_tui.engine.machine import nvml
        from mgpu_tui.engine.machine.telemetry import Sampler

        start = time.monotonic()
        nvml.status()  # initialise NVML in this process

        def cost(fn, n: int = 10) -> tuple[float, float]:
            walls, cpus = [], []
            for _ in range(n):
                w, c = time.perf_counter(), time.thread_time()
                fn()
                walls.append(time.perf_counter() - w)
                cpus.append(time.thread_time() - c)
            return statistics.median(walls) * 1e3, statistics.median(cpus) * 1e3

        base = cost(lambda: nvml.readings(0, pcie=False))
        full = cost(lambda: nvml.readings(0, pcie=True))
        sampler = Sampler()
        sample = cost(sampler.sample, 20)
        # An 8-GPU box: eight GPUs' readings without PCIe, plus one GPU's PCIe in turn.
        eight = 8 * base[0] + (full[0] - base[0])
        metrics = {
            "readings_ms": base,
            "readings_with_pcie_ms": full,
            "sample_ms": sample,
            "eight_gpus_sample_ms_estimate": eight,
        }
        detail = (
            f"one GPU's readings {base[0]:.2f} ms wall / {base[1]:.2f} ms CPU; with PCIe "
            f"{full[0]:.1f} ms wall / {full[1]:.2f} ms CPU; a whole sample {sample[0]:.1f} ms wall / "
            f"{sample[1]:.2f} ms CPU; an 8-GPU sample would take about {eight:.0f} ms"
        )
        ok = sample[0] < 100 and eight < 100
        return Result("sampler-cost", ok, detail, time.monotonic() - start, metrics)
