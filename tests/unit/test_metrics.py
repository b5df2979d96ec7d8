"""The metrics endpoint (engine/metrics/): what a scrape reads, served over real HTTP in this process
(its threads, no process), from real run folders read as any run is (records/follow.py).

- A rank's hostile output (quotes, newlines, backslashes, escapes, 10,000 characters) never reaches
  a label: every label value is the engine's own word or a fixed kind.
- A scrape never waits for the monitor: publishing a snapshot while a scrape is half-way returns at
  once, and that scrape still reads the snapshot it began with, whole.
- Every metric is in docs/metrics.md's table, and the table holds nothing else; names and types
  follow Prometheus' conventions.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import re
import socket
import threading
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from conftest import HOSTILE, REPO, hostile_finished_run
from mgpu_tui.cli import main
from mgpu_tui.engine.launch.errors import EnvironmentUnusable
from mgpu_tui.engine.metrics import families as families_module
from mgpu_tui.engine.metrics.families import METRICS
from mgpu_tui.engine.metrics.server import MetricsServer
from mgpu_tui.engine.metrics.snapshot import label_word
from mgpu_tui.engine.protocol.causes import CAUSE_KINDS, RootCause, cause_kind
from mgpu_tui.engine.records.follow import FollowedRun

LABEL_VALUE = re.compile(r"[A-Za-z0-9._:@+ /-]{0,128}")


def scrape(server: MetricsServer, *, openmetrics: bool = False, gzipped: bool = False) -> bytes:
    headers = {"Accept": "application/openmetrics-text; version=1.0.0"} if openmetrics else {}
    if gzipped:
        headers["Accept-Encoding"] = "gzip"
    with urllib.request.urlopen(urllib.request.Request(server.url, headers=headers), timeout=30) as answer:
        body = answer.read()
        return gzip.decompress(body) if answer.headers.get("Content-Encoding") == "gzip" else body


@pytest.fixture
def served():
    servers = []

    def serve(run) -> MetricsServer:
        server = MetricsServer(0, "127.0.0.1", linger_s=0)
        server.start()
        servers.append(server)
        while not run.poll().finished:
            pass
        server.publish(run, force=True)
        return server

    yield serve
    for server in servers:
        server.close()


def test_a_ranks_hostile_output_never_reaches_a_label(tmp_path, served):
    run = FollowedRun(hostile_finished_run(tmp_path))
    server = served(run)
    for openmetrics in (False, True):
        body = scrape(server, openmetrics=openmetrics, gzipped=openmetrics).decode()
        assert "evil" not in body and '\\"' not in body and "\x1b" not in body
        parsed = list(text_string_to_metric_families(body.replace("# EOF\n", "")))
        values = {v for family in parsed for sample in family.samples for v in sample.labels.values()}
        assert {v for v in values if not LABEL_VALUE.fullmatch(v)} == set()
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in parsed for s in f.samples}
    # The ranks' words became the engine's: an unknown device is "other", a host its safe letters,
    # a forged root-cause kind the failure's own shape; the run's state is the summary's.
    info = [dict(labels) for (name, labels) in samples if name == "mgpu_rank_info"]
    assert {i["device"] for i in info} == {"other"} and all("UUID" not in i for i in info)
    assert {i["host"] for i in info} == {label_word(HOSTILE)} and label_word(HOSTILE).startswith("x___1_mgpu")
    causes = [dict(labels) for (name, labels) in samples if name == "mgpu_run_root_cause"]
    assert causes == [{"run": "20260101T000000Z-ddp", "node": "0", "kind": "error", "rank": "1"}]
    failed = {
        dict(labels)["mgpu_run_state"]: v for (name, labels), v in samples.items() if name == "mgpu_run_state"
    }
    assert failed["failed"] == 1 and sum(failed.values()) == 1


def test_the_figures_served_are_the_runs(tmp_path, served):
    """A followed run's figures, served: each the one the Run view and the summary read."""
    run = FollowedRun(hostile_finished_run(tmp_path))
    server = served(run)
    stats = run.stats()
    parsed = list(text_string_to_metric_families(scrape(server).decode()))
    value = {
        (s.name, s.labels.get("rank")): s.value
        for f in parsed
        for s in f.samples
        if "quantile" not in s.labels
    }
    assert value[("mgpu_rank_steps_total", "0")] == 10 == stats.ranks[0].last_step
    assert value[("mgpu_rank_samples_per_second", "1")] == pytest.approx(stats.ranks[1].samples_per_s)
    assert value[("mgpu_rank_step_seconds", "1")] == pytest.approx(0.1)
    assert value[("mgpu_rank_memory_peak_bytes", "0")] == 1 << 21
    assert value[("mgpu_run_samples_per_second", None)] == pytest.approx(stats.samples_per_s)
    assert value[("mgpu_run_world_size", None)] == 2
    assert ("mgpu_rank_flops_per_second", "0") not in value  # not counted: left out, never 0
    states = {
        (s.labels["rank"], s.labels["mgpu_rank_state"]) for f in parsed for s in f.samples
        if s.name == "mgpu_rank_state" and s.value == 1
    }  # fmt: skip
    assert states == {("0", "failed"), ("1", "failed")}  # each wrote an error (not its peer gone)
    every = {
        (s.labels["rank"], s.labels["mgpu_rank_state"])
        for f in parsed
        for s in f.samples
        if s.name == "mgpu_rank_state"
    }
    served_states = {
        "starting",
        "running",
        "slow",
        "silent",
        "stalled",
        "failed",
        "no peer",
        "stopped",
        "done",
    }
    assert every == {(rank, state) for rank in ("0", "1") for state in served_states}  # a whole state set


def test_a_scrape_never_waits_for_the_monitor(tmp_path, served, monkeypatch):
    run = FollowedRun(hostile_finished_run(tmp_path))
    server = served(run)
    first = server.snapshot
    inside, go_on = threading.Event(), threading.Event()
    real = families_module.families

    def slow_families(snap):
        inside.set()
        assert go_on.wait(30)
        return real(snap)

    monkeypatch.setattr("mgpu_tui.engine.metrics.server.families", slow_families)
    bodies: list[bytes] = []
    scraper = threading.Thread(target=lambda: bodies.append(scrape(server)))
    scraper.start()
    assert inside.wait(30)
    # The monitor publishes while the scrape is half-way: it returns, and the new snapshot is in place.
    later = dataclasses.replace(first, stats=dataclasses.replace(first.stats, steps=99))
    server.snapshot = later  # what publish() does: one assignment, no lock
    server.publish(run, force=True)
    assert server.snapshot is not first
    go_on.set()
    scraper.join(30)
    steps = [s.value for f in text_string_to_metric_families(bodies[0].decode()) for s in f.samples
             if s.name == "mgpu_run_steps_total"]  # fmt: skip
    assert steps == [first.stats.steps]  # the snapshot it began with, whole


def test_a_port_in_use_is_one_sentence_before_anything_starts(tmp_path, capsys):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    with pytest.raises(
        EnvironmentUnusable, match=rf"--metrics-port {port}: cannot serve metrics on 127.0.0.1:{port} "
    ):
        MetricsServer(port).start()
    code = main(["run", "ddp", "--device", "cpu", "--run-dir", str(tmp_path), "--metrics-port", str(port)])
    err = capsys.readouterr().err
    assert code == 3 and f"--metrics-port {port}: cannot serve" in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []  # no run folder: nothing started
    taken.close()


@pytest.mark.parametrize(
    ("variable", "value", "said"),
    [
        ("MGPU_METRICS_PORT", "http", "MGPU_METRICS_PORT must be a whole number, got 'http'."),
        ("MGPU_METRICS_PORT", "70000", "MGPU_METRICS_PORT must be at most 65,535, got 70,000."),
        ("MGPU_METRICS_LINGER", "inf", "MGPU_METRICS_LINGER must be a finite number, got 'inf'."),
    ],
)
def test_a_bad_environment_variable_is_a_usage_error(tmp_path, capsys, monkeypatch, variable, value, said):
    monkeypatch.setenv("MGPU_METRICS_PORT", "9101")
    monkeypatch.setenv(variable, value)
    code = main(["run", "ddp", "--device", "cpu", "--run-dir", str(tmp_path)])
    assert code == 2 and said in capsys.readouterr().err


def test_a_root_causes_kind_is_one_of_a_fixed_set():
    def kind(**fields) -> str:
        base = dict(rank=1, exit_code=1, signal=None, message="RuntimeError: boom", traceback="")
        return cause_kind(RootCause(**{**base, **fields}))

    assert kind() == "error"
    assert kind(kind="stall") == "stall"
    assert kind(kind='stall"}\n') == "error"  # a kind read back that is none of them: not believed
    assert kind(message="torch.OutOfMemoryError: CUDA out of memory. Tried to allocate") == "out_of_memory"
    assert kind(signal="SIGSEGV", exit_code=-11) == "signal"
    assert kind(rank=None) == "launcher"
    assert {kind(kind=k) for k in CAUSE_KINDS} == set(CAUSE_KINDS)


def test_every_metric_follows_prometheus_conventions():
    units = ("seconds", "bytes", "ratio", "watts", "celsius", "hertz", "joules", "second", "size", "info")
    for name, declared in METRICS.items():
        assert re.fullmatch(r"mgpu_(run|rank|gpu)_[a-z_]+", name)
        assert "job" not in declared.labels and declared.labels[:2] == ("run", "node")
        assert name.endswith("_total") == (declared.type == "counter")
        assert name.endswith("_info") == (declared.type == "info")
        last = name.removesuffix("_total").rsplit("_", 1)[-1]
        assert (
            declared.type in ("stateset", "info")
            or last in units
            or name.endswith(
                (
                    "_steps_total",
                    "_events_total",
                    "_collectives_total",
                    "_loss",
                    "_verdict",
                    "_verdict_rank",
                    "_root_cause",
                    "_lost",
                    "_state",
                )  # fmt: skip
            )
        ), name


def test_the_docs_table_lists_every_metric_and_nothing_else():
    text = (REPO / "docs" / "metrics.md").read_text()
    table = re.findall(r"^\| `(mgpu_[a-z_]+)` \| (\w+) \|", text, re.M)
    assert [name for name, _ in table] == list(METRICS)
    assert {name: kind for name, kind in table} == {name: m.type for name, m in METRICS.items()}


def test_the_gpus_are_served_as_the_telemetry_read_them(tmp_path, served):
    """NVML's readings (the stand-in's H100 box) as DCGM's quantities in base units, by ``gpu`` and
    ``UUID`` as DCGM's exporter labels them, so that a dashboard joins the two."""
    from conftest import TOPOLOGIES
    from mgpu_tui.engine.machine import nvml
    from mgpu_tui.engine.machine.telemetry import Sampler
    from mgpu_tui.engine.machine.topology import parse_topo_text
    from mgpu_tui.engine.metrics.snapshot import _live_gpus
    from nvml_standin import machine_from_topology, standin

    topology = parse_topo_text((TOPOLOGIES / "h100-sxm-8x-nvswitch.txt").read_text())
    machine = machine_from_topology(topology, "NVIDIA H100 80GB HBM3", 80, nvlink_rate=100 << 30)
    machine.gpus[2].memory_used, machine.gpus[2].util = 40 << 30, 80
    nvml.use_library(standin(machine))
    try:
        sample = Sampler(pcie=False).sample()
    finally:
        nvml.use_library(None)
    server = served(FollowedRun(hostile_finished_run(tmp_path)))
    server.snapshot = dataclasses.replace(server.snapshot, gpus=_live_gpus(sample))
    parsed = list(text_string_to_metric_families(scrape(server).decode()))
    gpu2 = {s.name: s for f in parsed for s in f.samples if s.labels.get("gpu") == "2"}
    assert gpu2["mgpu_gpu_utilization_ratio"].value == pytest.approx(0.8)
    assert gpu2["mgpu_gpu_memory_used_bytes"].value == 40 << 30
    assert gpu2["mgpu_gpu_memory_total_bytes"].value == 80 << 30
    assert gpu2["mgpu_gpu_power_watts"].value == pytest.approx(470.0)
    assert gpu2["mgpu_gpu_info"].labels["modelName"] == "NVIDIA_H100_80GB_HBM3"
    assert gpu2["mgpu_gpu_utilization_ratio"].labels["UUID"] == machine.gpus[2].uuid
    assert len({s.labels["gpu"] for f in parsed for s in f.samples if s.name == "mgpu_gpu_lost"}) == 8


def test_the_grafana_dashboard_asks_only_for_metrics_that_exist():
    """docs/grafana-dashboard.json: every query names metrics of the table (and its state timeline's
    codes, the rank states served); a real Prometheus answers each (test_metrics_prometheus.py)."""
    dashboard = json.loads((REPO / "docs" / "grafana-dashboard.json").read_text())
    queries = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    named = {name for q in queries for name in re.findall(r"\b(mgpu_[a-z_]+)\{", q)}
    assert named and named <= set(METRICS)
    assert {"mgpu_rank_state", "mgpu_rank_step_seconds", "mgpu_rank_step_part_seconds"} <= named
    assert {"mgpu_run_mfu_ratio", "mgpu_gpu_utilization_ratio"} <= named
    (timeline,) = [p for p in dashboard["panels"] if p["type"] == "state-timeline"]
    codes = timeline["fieldConfig"]["defaults"]["mappings"][0]["options"]
    served = {s.value for s in families_module.RANK_STATES}
    assert {code["text"] for code in codes.values()} == served
    for code, mapping in codes.items():
        assert f'mgpu_rank_state="{mapping["text"]}"}} * {code})' in timeline["targets"][0]["expr"]


def test_a_snapshot_that_fails_leaves_the_last_one_served_and_the_run_alone(tmp_path, served, monkeypatch):
    run = FollowedRun(hostile_finished_run(tmp_path))
    server = served(run)
    last = server.snapshot

    def broken(*args, **kwargs):
        raise RuntimeError("a bug in taking the snapshot")

    monkeypatch.setattr("mgpu_tui.engine.metrics.server.take", broken)
    server.publish(run, force=True)  # raises nothing into the polling thread
    assert server.snapshot is last and server.errors == 1
    assert b"mgpu_rank_steps_total" in scrape(server)
