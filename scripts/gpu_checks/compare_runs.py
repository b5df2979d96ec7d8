"""compare and transformer: mgpu-tui compare on the GPU, the GPT runs' tokens/s, MFU and memory against
the plan, and the energy counter against nvidia-smi's power."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from pathlib import Path

from gpu_checks.base import CheckerBase, Result
from mgpu_tui.engine.protocol.rundir import RunDir

# The transformer runs: (model, global batch, steps, autocast dtype, modes), each on one GPU. gpt-1.3b
# in bf16 is the largest GPT that trains on one 80 GB GPU with SGD (47 GiB planned at batch 8).
TRANSFORMER_RUNS = (
    ("gpt-1.3b", 8, 20, "bf16", ("single", "ddp", "fsdp")),
    ("gpt-1.3b", 8, 20, "fp16", ("single",)),
    ("gpt-125m", 16, 30, "bf16", ("single", "ddp", "fsdp")),
    ("gpt-125m", 16, 30, "fp16", ("single",)),
)


ENERGY_TOLERANCE = 0.10  # NVML's energy counter against nvidia-smi's power integrated, 4 readings a second


class PowerLog:
    """nvidia-smi's power.draw of GPU 0, about 4 times a second, on a thread: [[time, watts], ...]."""

    def __init__(self) -> None:
        self.samples: list[list[float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            done = subprocess.run(
                ["nvidia-smi", "--id=0", "--query-gpu=power.draw", "--format=csv,noheader,nounits"],
                capture_output=True,
                text=True,
            )
            try:
                self.samples.append([time.time(), float(done.stdout.strip())])
            except ValueError:
                pass
            self._stop.wait(0.25)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


class CompareChecks(CheckerBase):
    def run_compare(self, name: str, argv: list[str], timeout: float) -> tuple[list[dict] | None, bool, int]:
        """``mgpu-tui compare ARGV`` with its report in out/NAME.json: (its rows, None without a report;
        whether it exited 0 with every row ok and an MFU between 0 and 1; its exit code)."""
        report = self.out / f"{name}.json"
        done = self.sh(
            name,
            self.mgpu("compare", *argv, "--run-dir", str(self.out / "runs"), "--out", str(report)),
            timeout,
        )
        try:
            rows = json.loads(report.read_text())["rows"]
        except (OSError, ValueError, KeyError):
            return None, False, done.returncode
        ok = done.returncode == 0 and all(r["status"] == "ok" and r["mfu"] and 0 < r["mfu"] < 1 for r in rows)
        return rows, ok, done.returncode

    def compare(self) -> Result:
        start = time.monotonic()
        share = ["--share-gpus"] if self.gpus < 2 else []
        argv = ["single", "ddp", "fsdp", "--device", "cuda", "--nproc", "2", "--steps", "200", *share]
        rows, ok, code = self.run_compare("compare", argv, 300)
        if rows is None:
            return Result("compare", False, f"no report (exit {code}); see compare.log")
        detail = "; ".join(
            f"{r['mode']} {r['samples_per_s'] or 0:,.0f} samples/s on {r['devices']} GPU(s), "
            f"{r['tflops_per_device'] or 0:.3f} TFLOP/s, MFU {100 * (r['mfu'] or 0):.3f}%"
            for r in rows
        )
        keep = ("mode", "samples_per_s", "devices", "tflops_per_device", "mfu")
        metrics = {"rows": [{k: r[k] for k in keep} for r in rows]}
        return Result("compare", ok, detail, time.monotonic() - start, metrics)

    def transformer(self) -> list[Result]:
        """GPTs on one GPU, each precision: the plan, then compare's rows (tokens/s, MFU against the
        datasheet's dense peak, the allocator's peak against the plan's total). nvidia-smi's power is
        read all the while, for the energy check (NVML's counter against its integral)."""
        power = PowerLog()
        power.start()
        results = []
        try:
            for model, batch, steps, precision, modes in TRANSFORMER_RUNS:
                results.append(self._transformer(model, batch, steps, precision, modes))
        finally:
            power.stop()
        (self.out / "nvidia-smi-power.json").write_text(json.dumps(power.samples))
        results.append(self._energy(power.samples))
        return results

    def _transformer(self, model: str, batch: int, steps: int, precision: str, modes: tuple) -> Result:
        name = f"transformer:{model}:{precision}"
        start = time.monotonic()
        shape = ["--model", model, "--batch-size", str(batch), "--amp"]
        planned = self.sh(f"plan-{model}", self.mgpu("plan", *shape, "--json"), 120)
        try:
            plan = {m["mode"]: m for m in json.loads(planned.stdout)["modes"]}
        except (ValueError, KeyError):
            return Result(name, False, f"no plan (exit {planned.returncode}); see plan-{model}.log")
        argv = [*modes, "--device", "cuda", "--nproc", "1", "--steps", str(steps), *shape]
        rows, ok, code = self.run_compare(name.replace(":", "-"), [*argv, "--amp-dtype", precision], 300)
        if rows is None:
            return Result(name, False, f"no report (exit {code}); see {name.replace(':', '-')}.log")
        measured = []
        for r in rows:
            rank0 = r["memory"][0] if r["memory"] else {}
            predicted, peak = rank0.get("predicted_total_bytes"), rank0.get("peak_bytes")
            self.runs_of_transformer.append(r["run_dir"])
            measured.append(
                {
                    "mode": r["mode"],
                    "status": r["status"],
                    "mfu": r["mfu"],
                    "tokens_per_s": r["tokens_per_s"],
                    "tflops_per_device": r["tflops_per_device"],
                    "step_time_s_median": r["step_time_s_median"],
                    "predicted_total_bytes": predicted,
                    "peak_bytes": peak,
                    "peak_vs_plan": peak / predicted - 1 if peak and predicted else None,
                    "tensor_peak_bytes": rank0.get("tensor_peak_bytes"),
                    "predicted_state_bytes": rank0.get("predicted_state_bytes"),
                    "measured_state_bytes": rank0.get("measured_state_bytes"),
                    "fits": plan.get(r["mode"], {}).get("fits"),
                    "final_loss": r["final_loss"],
                    "run_dir": r["run_dir"],
                    "root_cause": r["root_cause"],
                }
            )
        gib = 2**30
        detail = "; ".join(
            f"{m['mode']} {m['tokens_per_s'] or 0:,.0f} tokens/s, MFU {100 * (m['mfu'] or 0):.1f}%, peak "
            f"{(m['peak_bytes'] or 0) / gib:.2f} GiB vs plan "
            f"{(m['predicted_total_bytes'] or 0) / gib:.2f} GiB"
            + (f" ({100 * m['peak_vs_plan']:+.0f}%)" if m["peak_vs_plan"] is not None else "")
            for m in measured
        )
        return Result(name, ok, detail, time.monotonic() - start, {"rows": measured, "plan": plan})

    def _energy(self, power: list[list[float]]) -> Result:
        """Each transformer run's joules from NVML's total energy counter (its telemetry, first sample
        to last) against nvidia-smi's power.draw, read about 4 times a second and integrated over the
        same seconds."""
        start, checked = time.monotonic(), []
        for run_dir in self.runs_of_transformer:
            samples = []
            for line in RunDir(run_dir).telemetry_path.read_text().splitlines():
                record = json.loads(line)
                gpu = record["gpus"][0] if record.get("gpus") else {}
                if gpu.get("energy_mj") is not None:
                    samples.append((record["t"], gpu["energy_mj"]))
            if len(samples) < 2:
                continue
            (t0, e0), (t1, e1) = samples[0], samples[-1]
            inside = [(t, w) for t, w in power if t0 <= t <= t1]
            if len(inside) < 4 or t1 - t0 < 5:
                continue
            smi = sum((b[0] - a[0]) * (a[1] + b[1]) / 2 for a, b in zip(inside, inside[1:]))
            smi *= (t1 - t0) / (inside[-1][0] - inside[0][0])  # the edges, at the mean power
            summary = json.loads(RunDir(run_dir).summary_path.read_text())
            checked.append(
                {
                    "run": Path(run_dir).name,
                    "seconds": t1 - t0,
                    "counter_j": (e1 - e0) / 1000,
                    "summary_energy_j": summary["telemetry"]["gpus"][0]["energy_j"],
                    "nvidia_smi_j": smi,
                    "mean_power_w": (e1 - e0) / 1000 / (t1 - t0),
                }
            )
        if not checked:
            return Result("energy", False, "no transformer run had an energy counter and power readings")
        worst = max(abs(c["counter_j"] / c["nvidia_smi_j"] - 1) for c in checked)
        ok = worst <= ENERGY_TOLERANCE and all(
            c["summary_energy_j"] is not None and abs(c["summary_energy_j"] - c["counter_j"]) < 1
            for c in checked
        )
        detail = (
            f"{len(checked)} runs: "
            + "; ".join(
                f"{c['counter_j'] / 1000:.2f} kJ by the counter vs {c['nvidia_smi_j'] / 1000:.2f} kJ by "
                f"nvidia-smi over {c['seconds']:.0f} s ({c['mean_power_w']:.0f} W)"
                for c in checked[:4]
            )
            + f"; worst difference {100 * worst:.1f}% (<= {100 * ENERGY_TOLERANCE:.0f}%)"
        )
        return Result("energy", ok, detail, time.monotonic() - start, {"runs": checked})
