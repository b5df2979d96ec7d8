"""A job over real separate hosts: network namespaces, each with its own address, hostname and
hosts file (separate_hosts.py), one `mgpu-tui run` per host, as one would start it on each node.

What is tested is what breaks between hosts and not on 127.0.0.1: the rendezvous store hosted
by the node that owns the endpoint's address, a rank's failure named on every node, a host that
vanishes (its link cut, its mgpu-tui killed) named by the other, a host that never comes, and an
endpoint that resolves nowhere. Needs root; without it every test here skips, saying why.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from waiting import wait_for, wait_until

from tests.conftest import CLI
from tests.integration.separate_hosts import Host, HostsUnavailable, SeparateHosts

# Real hosts are slow to make and to lose: run apart from the suite (make test-hosts; CI runs them).
pytestmark = pytest.mark.hosts
ENDPOINT = "bn-host0:29400"
CUT_DEADLINE_S = 15  # the promise: the other host ends within this long of the loss


@pytest.fixture
def hosts():
    try:
        with SeparateHosts(2) as made:
            yield made
            left = {h.hostname: made.pids_in(h) for h in made.hosts}
            assert left == {h.hostname: [] for h in made.hosts}, f"processes left running: {left}"
    except HostsUnavailable as exc:
        pytest.skip(f"separate hosts cannot be made here: {exc}")


def start(
    host: Host,
    runs: Path,
    *args: str,
    mode: str = "ddp",
    job: str = "job",
    endpoint: str = ENDPOINT,
    steps: int = 8,
    run_dir: Path | None = None,
) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PET_")}
    argv = [
        *CLI,
        "run",
        mode,
        "--nnodes",
        "2",
        "--node-rank",
        str(host.node),
        "--nproc",
        "2",
        "--rdzv-endpoint",
        endpoint,
        "--rdzv-id",
        job,
        "--steps",
        str(steps),
        "--device",
        "cpu",
        "--run-dir",
        str(run_dir or runs / host.hostname),
        "--sample-interval",
        "0",
        "--json",
        *args,
    ]
    return subprocess.Popen(
        host.argv(*argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )


def finish(node: subprocess.Popen, timeout: float = 90) -> tuple[int, dict | None, str]:
    """(exit code, the summary or None, stderr) of one node's mgpu-tui."""
    out, err = node.communicate(timeout=timeout)
    lines = out.strip().splitlines()
    return node.returncode, json.loads(lines[-1]) if lines else None, err


def first_step_seen(runs: Path, host: Host, step: int, timeout: float = 60) -> None:
    """Wait until a rank of ``host`` reports ``step``: the job runs on both hosts."""

    def reported() -> bool:
        return any(
            json.loads(line).get("step", 0) >= step
            for events in (runs / host.hostname).glob("*/events/rank*.jsonl")
            for line in events.read_text().splitlines()[-3:]
            if line.endswith("}")
        )

    if wait_until(reported, timeout, every=0.2):
        return
    raise AssertionError(f"{host.hostname} reported no step {step} in {timeout} s")


@pytest.mark.parametrize("mode", ["ddp", "fsdp"])
async def test_two_hosts_of_two_ranks_train_one_job_of_world_size_four(hosts, tmp_path, mode):
    # fsdp: each host keeps its own run folder; ddp: they share one, as over NFS.
    shared = mode == "ddp"
    run_dir = tmp_path / "shared" if shared else None
    nodes = [start(h, tmp_path, mode=mode, run_dir=run_dir) for h in hosts.hosts]
    results = [finish(n) for n in nodes]
    for host, (code, summary, err) in zip(hosts.hosts, results):
        assert code == 0, err
        assert summary["status"] == "ok" and summary["world_size"] == 4 and summary["steps"] == 8
        assert [(n["host"], n["ranks"], n["state"]) for n in summary["nodes"]] == [
            ("bn-host0", "0-1", "ok"),
            ("bn-host1", "2-3", "ok"),
        ]
        assert f"node {host.node} of 2 (bn-host{host.node}, ranks" in err
    # Each host's ranks ran there: their hello names the host they ran on.
    for host, ranks in zip(hosts.hosts, ((0, 1), (2, 3))):
        for rank in ranks:
            folder = tmp_path / "shared" if shared else tmp_path / host.hostname
            events = next(folder.glob(f"*/events/rank{rank}.jsonl")).read_text()
            assert json.loads(events.splitlines()[0])["host"] == host.hostname
    if shared:  # the app opens the shared folder: every rank, grouped under its node and host
        await shows_ranks_by_node(next((tmp_path / "shared").iterdir()))


async def shows_ranks_by_node(folder: Path) -> None:
    from mgpu_tui.app import create_app
    from mgpu_tui.app.views.run.view import RunView

    app = create_app(telemetry=[], topology=None, open_run=folder, run_root=folder.parent)
    async with app.run_test(size=(120, 40)) as pilot:
        view = app.query_one(RunView)
        await wait_for(pilot, lambda: view.finished, timeout=20)
        assert [row[:3] for row in view.rank_table.rank_rows] == [
            ("node 0 · bn-host0 · ranks 0-1",),
            ("rank 0", "done", "8"),
            ("rank 1", "done", "8"),
            ("node 1 · bn-host1 · ranks 2-3",),
            ("rank 2", "done", "8"),
            ("rank 3", "done", "8"),
        ]


def test_a_rank_failing_on_one_host_is_named_with_its_host_on_both(hosts, tmp_path):
    fail = ("--", "--fail-at-step", "4", "--fail-rank", "3")
    nodes = [start(h, tmp_path, *fail, steps=200) for h in hosts.hosts]
    for code, summary, err in (finish(n) for n in nodes):
        assert code == 1
        assert summary["root_cause"]["rank"] == 3
        headline = next(line for line in err.splitlines() if "failed first" in line)  # the first one said
        assert "rank 3 on bn-host1 failed first" in headline and "injected failure at step 4 on rank 3" in err


def test_a_host_cut_off_mid_run_is_named_by_the_other_within_seconds(hosts, tmp_path):
    nodes = [start(h, tmp_path, steps=100000) for h in hosts.hosts]
    first_step_seen(tmp_path, hosts.hosts[0], 3)
    hosts.cut(hosts.hosts[1])
    cut_at = time.monotonic()
    code, summary, err = finish(nodes[0], timeout=60)
    took = time.monotonic() - cut_at
    assert code == 1 and took < CUT_DEADLINE_S, (took, err)
    assert "host bn-host1 (node 1, ranks 2-3) stopped answering" in err
    assert summary["root_cause"]["verdict"]
    assert {n["host"]: n["state"] for n in summary["nodes"]}["bn-host1"] == "lost"
    code, summary, err = finish(nodes[1], timeout=60)  # the cut-off host, from its side: node 0 went silent
    assert code == 1 and "host bn-host0 (node 0, ranks 0-1) stopped answering" in err


def test_a_killed_mgpu_tui_on_one_host_is_named_by_the_other(hosts, tmp_path):
    nodes = [start(h, tmp_path, steps=100000) for h in hosts.hosts]
    first_step_seen(tmp_path, hosts.hosts[1], 3)
    nodes[1].send_signal(signal.SIGKILL)  # ip netns exec, unshare and sh each exec the next: this is mgpu-tui
    killed_at = time.monotonic()
    code, summary, err = finish(nodes[0], timeout=60)
    assert code == 1 and time.monotonic() - killed_at < CUT_DEADLINE_S, err
    assert "host bn-host1 (node 1, ranks 2-3) stopped answering" in err
    nodes[1].communicate(timeout=10)
    # The killed node's ranks and link die with it (parent-death signals).
    assert wait_until(lambda: hosts.pids_in(hosts.hosts[1]) == [], 10, every=0.2)


def test_a_host_that_never_comes_and_an_endpoint_nobody_hosts_each_fail_in_one_sentence(hosts, tmp_path):
    alone = start(hosts.hosts[0], tmp_path, "--join-timeout", "5", job="alone")
    # Node 1 of another job, whose endpoint names host 0 at a port where nothing listens.
    stray = start(hosts.hosts[1], tmp_path, "--join-timeout", "5", job="stray", endpoint="bn-host0:29411")
    started = time.monotonic()
    code, summary, err = finish(alone, timeout=60)
    assert code == 1 and time.monotonic() - started < 5 + 10
    assert (
        "node 0 waited 5 s for node 1 of 2 to join the rendezvous at bn-host0:29400 (id alone): start "
        "`mgpu-tui run` on every node with the same --rdzv-endpoint, --rdzv-id and --nnodes"
    ) in err
    assert "Traceback" not in err and summary["nodes"][1]["state"] == "missing"
    code, summary, err = finish(stray, timeout=60)
    assert code == 1
    assert "node 1 could not reach the rendezvous at bn-host0:29411 within 5 s" in err
    assert "Traceback" not in err


def test_an_endpoint_that_resolves_nowhere_fails_at_once_and_a_public_one_is_warned_about(hosts, tmp_path):
    started = time.monotonic()
    node = start(hosts.hosts[1], tmp_path, endpoint="bn-host7:29400")
    code, summary, err = finish(node, timeout=30)
    assert code == 2 and summary is None and time.monotonic() - started < 5
    (line,) = err.strip().splitlines()  # one sentence; the resolver's own words close it
    assert line.startswith("mgpu-tui: --rdzv-endpoint: the host 'bn-host7' cannot be resolved (")
    # A public address (unreachable from the namespace, which has no route out): a warning, then the sentence.
    node = start(hosts.hosts[1], tmp_path, "--join-timeout", "2", endpoint="8.8.8.8:29400", job="public")
    code, summary, err = finish(node, timeout=30)
    assert code == 1
    assert err.count("warning: the rendezvous endpoint 8.8.8.8:29400 is a public address") == 1
    assert "node 1 could not reach the rendezvous at 8.8.8.8:29400 within 2 s" in err
