"""The run's figures in a real Prometheus (Debian's, which CI installs): started on loopback with its
own configuration, scraping each run's ``--metrics-port`` every second, and read back through its
HTTP API as a Grafana panel reads it.

- A 2-rank ddp run with a straggler (rank 1 loads each batch 50 ms late): every documented metric,
  read back from Prometheus, is the figure the summary gives (or the run's events, for the few the
  summary does not hold), or absent where the summary has none; the straggler's rank; the final
  state kept after the run ends.
- A planted hang: rank 1's state goes running -> stalled.
- A planted crash, in a script whose rank prints and raises hostile text (quotes, newlines,
  backslashes, escapes, 10,000 characters): rank 1's state goes running -> failed, the root cause's
  kind and rank are served, and no label of any series holds the rank's text.
"""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import textwrap
import time
from pathlib import Path

import pytest
from waiting import wait_until

from conftest import CLI, REPO, only_run_dir, summary_from
from mgpu_tui.engine.metrics.families import METRICS
from mgpu_tui.engine.protocol.causes import cause_kind
from mgpu_tui.engine.run.causes.watchdog import stall_timeout
from mgpu_tui.engine.run.figures.aggregate import read_events
from mgpu_tui.engine.run.figures.anatomy import KINDS
from mgpu_tui.engine.run.summary import RunSummary
from prometheus_server import Prometheus, free_port

TARGET_LABELS = ("run", "node", "instance", "job", "slurm_job")  # whose the series are, not what
LINGER_S = 4  # a few scrapes at 1 s after the run ends
GPU_ONLY = {name for name in METRICS if name.startswith("mgpu_gpu_")}  # no NVML here: none served


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory):
    ports = {name: free_port() for name in ("straggler", "hang", "crash")}
    server = Prometheus(tmp_path_factory.mktemp("prometheus"), [f"127.0.0.1:{p}" for p in ports.values()])
    server.ports = ports  # type: ignore[attr-defined]
    yield server
    server.stop()


def start(port: int, runs: Path, what: tuple[str, ...], *args: str) -> subprocess.Popen:
    """``mgpu-tui run WHAT`` on 2 CPU ranks, its metrics at ``port``; ``args``: the rest of its line."""
    command = [*CLI, "run", *what, "--nproc", "2", "--device", "cpu", "--run-dir", str(runs), "--json"]
    command += ["--metrics-port", str(port), "--metrics-linger", str(LINGER_S), *args]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen, timeout: float = 180) -> tuple[RunSummary, str]:
    out, err = proc.communicate(timeout=timeout)
    return summary_from(out), err


def timeline(prometheus: Prometheus, run: str, rank: int, since: float) -> list[str]:
    """Rank ``rank``'s state at each scrape, as Prometheus holds it, repeats run together."""
    series = prometheus.values(f'mgpu_rank_state{{run="{run}",rank="{rank}"}} == 1', since, time.time())
    at = sorted((t, labels["mgpu_rank_state"]) for labels, values in series for t, _ in values)
    states = [state for _, state in at]
    return [s for i, s in enumerate(states) if i == 0 or states[i - 1] != s]


def served(prometheus: Prometheus, name: str, run: str) -> dict[tuple, float]:
    return prometheus.latest(f'{name}{{run="{run}"}}')


def expected(summary: RunSummary, run_dir: Path) -> dict[str, dict[tuple, float | None]]:
    """Every metric's value at the run's end, as the summary (or, for the few figures it does not
    hold, the run's own events) gives it: metric -> {(label, value) pairs less run and node: value}."""
    stats = read_events(run_dir, summary.world_size).stats()
    by_rank = {r.rank: r for r in stats.ranks}
    memory = {m.rank: m for m in summary.memory}
    late = {s.rank: s.late_s for s in summary.stragglers}
    anatomy = {a.rank: a for a in summary.anatomy}
    cause = summary.root_cause
    compute = summary.compute
    want: dict[str, dict[tuple, float | None]] = {
        "mgpu_run_world_size": {(): summary.world_size},
        "mgpu_run_steps_total": {(): summary.steps},
        "mgpu_run_samples_per_second": {(): summary.samples_per_s},
        "mgpu_run_tokens_per_second": {(): summary.tokens_per_s},
        "mgpu_run_loss": {(): summary.final_loss},
        "mgpu_run_flops_per_second": {(): flops(compute)},
        "mgpu_run_mfu_ratio": {(): compute.mfu if compute else None},
        "mgpu_run_stall_timeout_seconds": {(): stall_timeout(None, stats_recent(run_dir, summary))},
        "mgpu_run_malformed_events_total": {(): summary.malformed_events},
        "mgpu_run_verdict": {(("kind", k),): float(k in {v.kind for v in summary.verdicts}) for k in KINDS},
        "mgpu_run_root_cause": {
            (("kind", cause_kind(cause)), ("rank", str(cause.rank))): 1.0 for _ in [cause] if cause
        },
    }
    median, spread = summary.step_time_s_median, summary.step_time_s_p10_p90 or (None, None)
    want["mgpu_run_step_seconds"] = {
        (("quantile", q),): v for q, v in (("0.1", spread[0]), ("0.5", median), ("0.9", spread[1]))
    }
    per_rank = {
        "mgpu_rank_steps_total": lambda r: r.last_step,
        "mgpu_rank_samples_per_second": lambda r: r.samples_per_s,
        "mgpu_rank_tokens_per_second": lambda r: r.tokens_per_s,
        "mgpu_rank_loss": lambda r: r.loss,
        "mgpu_rank_memory_peak_bytes": lambda r: r.peak_mem_bytes,
        "mgpu_rank_collectives_total": lambda r: r.collectives,
        "mgpu_rank_flops_per_second": lambda r: flops(r.compute),
        "mgpu_rank_mfu_ratio": lambda r: r.compute.mfu if r.compute else None,
        # Not in the summary: from the run's events, read back whole.
        "mgpu_rank_step_seconds": lambda r: by_rank[r.rank].step_s,
        "mgpu_rank_memory_bytes": lambda r: by_rank[r.rank].mem_bytes,
        "mgpu_rank_last_event_timestamp_seconds": lambda r: by_rank[r.rank].last_event_t,
        "mgpu_rank_tensor_peak_bytes": lambda r: getattr(memory.get(r.rank), "tensor_peak_bytes", None),
        "mgpu_rank_training_state_bytes": lambda r: getattr(memory.get(r.rank), "measured_state_bytes", None),
        "mgpu_rank_planned_training_state_bytes": lambda r: getattr(
            memory.get(r.rank), "predicted_state_bytes", None
        ),
        "mgpu_rank_planned_peak_bytes": lambda r: getattr(memory.get(r.rank), "predicted_total_bytes", None),
        "mgpu_rank_straggler_late_seconds": lambda r: late.get(r.rank),
    }
    for name, figure in per_rank.items():
        want[name] = {(("rank", str(r.rank)),): figure(r) for r in summary.ranks}
    want["mgpu_rank_step_part_seconds"] = {
        (("part", part), ("rank", str(rank))): a.seconds(part)
        for rank, a in anatomy.items()
        for part in ("data", "forward", "backward", "comm", "optimizer", "host")
    }
    return {name: {k: v for k, v in values.items() if v is not None} for name, values in want.items()}


def flops(compute) -> float | None:  # noqa: ANN001
    return compute.tflops * 1e12 if compute is not None and compute.tflops is not None else None


def stats_recent(run_dir: Path, summary: RunSummary) -> float | None:
    return read_events(run_dir, summary.world_size).recent_step_time()


def test_every_documented_metric_reaches_prometheus_as_the_summary_gives_it(prometheus, tmp_path):
    began = time.time()
    slow = ("--", "--fail-kind", "slow", "--fail-rank", "1")
    proc = start(prometheus.ports["straggler"], tmp_path, ("ddp",), "--steps", "60", *slow)
    summary, err = finish(proc)
    ended = time.time()
    assert proc.returncode == 0, err
    run_dir = only_run_dir(tmp_path)
    run = run_dir.name
    assert [s.rank for s in summary.stragglers] == [1]
    want = expected(summary, run_dir)
    checked = set(want)
    for name, values in want.items():
        got = {
            tuple((k, v) for k, v in labels if k not in TARGET_LABELS): value
            for labels, value in served(prometheus, name, run).items()
        }
        assert got.keys() == values.keys(), name
        for key, value in values.items():
            assert got[key] == pytest.approx(value, rel=1e-9), (name, key)
    # The states, kept after the end: the run ok, both ranks done; the straggler slow while it ran.
    state = {dict(k)["mgpu_run_state"]: v for k, v in served(prometheus, "mgpu_run_state", run).items()}
    assert state["ok"] == 1 and sum(state.values()) == 1
    final = f'mgpu_run_state{{run="{run}",mgpu_run_state="ok"}}'
    scrapes = prometheus.api("query", query=f"sum_over_time({final}[10m])")
    assert float(scrapes[0]["value"][1]) >= 2  # the final state, scraped at least twice after the end
    done = prometheus.latest(f'mgpu_rank_state{{run="{run}",mgpu_rank_state="done"}}')
    assert sorted(dict(k)["rank"] for k, v in done.items() if v == 1) == ["0", "1"]
    assert "slow" in timeline(prometheus, run, 1, began)
    assert "slow" not in timeline(prometheus, run, 0, began)
    checked |= {"mgpu_run_state", "mgpu_rank_state"}
    # Who and where: the info metrics, the snapshot's time, the ranks' processes as sampled.
    (info,) = served(prometheus, "mgpu_run_info", run)
    assert dict(info)["slurm_job"] == "test"  # the target's label, from docs/multi-node.md's file_sd
    assert dict(info)["mode"] == "ddp" and dict(info)["host"] == socket.gethostname()
    info_now = prometheus.latest(f'mgpu_rank_info{{run="{run}",device!="unknown"}}')  # (before its hello)
    devices = {dict(k)["rank"]: dict(k)["device"] for k in info_now}
    assert devices == {"0": "cpu", "1": "cpu"}
    (taken,) = served(prometheus, "mgpu_run_snapshot_timestamp_seconds", run).values()
    assert began < taken < ended
    for name in ("mgpu_rank_process_cpu_ratio", "mgpu_rank_process_resident_memory_bytes"):
        peaks = prometheus.api("query", query=f'max_over_time({name}{{run="{run}"}}[10m])')  # (as it ran)
        assert sorted((r["metric"]["rank"], float(r["value"][1]) > 0) for r in peaks) == [
            ("0", True),
            ("1", True),
        ]
    checked |= {"mgpu_run_info", "mgpu_rank_info", "mgpu_run_snapshot_timestamp_seconds"}
    checked |= {"mgpu_rank_process_cpu_ratio", "mgpu_rank_process_resident_memory_bytes"}
    verdict_ranks = served(prometheus, "mgpu_run_verdict_rank", run)
    named = {(v.kind, str(r)) for v in summary.verdicts if len(v.ranks) < summary.world_size for r in v.ranks}
    assert {(dict(k)["kind"], dict(k)["rank"]) for k in verdict_ranks} == named
    checked.add("mgpu_run_verdict_rank")
    for name in GPU_ONLY:
        assert served(prometheus, name, run) == {}, name
    # The Grafana dashboard's queries, as Grafana asks them, while the run was served.
    dashboard = json.loads((REPO / "docs" / "grafana-dashboard.json").read_text())
    answers = {
        panel["title"]: prometheus.api("query", query=target["expr"].replace("$run", run), time=taken)
        for panel in dashboard["panels"]
        for target in panel["targets"][:1]
    }
    codes = {r["metric"]["rank"]: r["value"][1] for r in answers["Ranks' state"]}
    assert codes == {"0": "8", "1": "8"}  # done, in the timeline's codes
    parts = {r["metric"]["part"] for r in answers["Where a step goes (mean over the ranks)"]}
    assert parts == {"data", "forward", "backward", "comm", "optimizer", "host"}
    assert len(answers["Step time by rank (mean over its steady steps)"]) == 2
    assert checked | GPU_ONLY == set(METRICS)  # every documented metric, checked


def test_a_planted_hang_goes_running_then_stalled(prometheus, tmp_path):
    began = time.time()
    hang = ("--", "--fail-at-step", "100", "--fail-rank", "1", "--fail-kind", "hang")
    watch = ("--steps", "100000", "--stall-timeout", "4", "--on-stall", "report")
    proc = start(prometheus.ports["hang"], tmp_path, ("ddp",), *watch, *hang)
    try:
        run = wait_until(lambda: [p.name for p in tmp_path.iterdir() if p.is_dir()], 60, every=0.2)[0]
        stalled = f'mgpu_rank_state{{run="{run}",rank="1",mgpu_rank_state="stalled"}} == 1'
        assert wait_until(lambda: prometheus.api("query", query=stalled), 120, every=0.5), "never stalled"
    finally:
        proc.send_signal(signal.SIGINT)
        summary, err = finish(proc)
    assert summary.status == "interrupted", err  # (stopped here, once Prometheus had seen the stall)
    states = timeline(prometheus, run, 1, began)
    assert states.index("running") < states.index("stalled"), states


CRASH = """
import os, sys, time
import torch
import torch.distributed as dist

HOSTILE = 'x"} 1\\nmgpu_rank_state{rank="0",mgpu_rank_state="done"} 1\\n\\\\"\\x1b[2J\\\\n evil '
dist.init_process_group("gloo")
rank = dist.get_rank()
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(1, 1000):
    x = torch.randn(16, 8)
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    time.sleep(0.05)
    print(HOSTILE, flush=True)
    print(HOSTILE, file=sys.stderr, flush=True)
    if step == 60 and rank == 1:
        raise RuntimeError(HOSTILE * 150)
"""


def test_a_planted_crash_goes_running_then_failed_and_no_ranks_text_is_a_label(prometheus, tmp_path):
    script = tmp_path / "crash.py"
    script.write_text(textwrap.dedent(CRASH))
    runs = tmp_path / "runs"
    began = time.time()
    proc = start(prometheus.ports["crash"], runs, ("--script", str(script)))
    summary, err = finish(proc)
    assert proc.returncode == 1 and summary.root_cause is not None and summary.root_cause.rank == 1, err
    assert len(summary.root_cause.traceback) > 10_000 and "evil" in summary.root_cause.traceback
    run = only_run_dir(runs).name
    kind = cause_kind(summary.root_cause)
    assert kind == "error"
    wait_until(lambda: prometheus.api("query", query=f'mgpu_run_root_cause{{run="{run}"}}'), 30, every=0.5)
    causes = served(prometheus, "mgpu_run_root_cause", run)
    assert [(dict(k)["kind"], dict(k)["rank"]) for k in causes] == [("error", "1")]
    states = timeline(prometheus, run, 1, began)
    assert "running" in states and states[-1] == "failed", states
    # Every label of every series of the run: the engine's words, never the rank's.
    series = prometheus.api("series", **{"match[]": f'{{run="{run}"}}', "start": began, "end": time.time()})
    assert len(series) > 50
    values = {value for labels in series for value in labels.values()}
    assert {v for v in values if not re.fullmatch(r"[A-Za-z0-9._:@+ /-]{0,128}", v)} == set()
    assert not any("evil" in v or "\n" in v or '"' in v for v in values)
    assert json.dumps(series).count("evil") == 0
