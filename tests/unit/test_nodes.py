"""Several nodes, without a process: the endpoint read up front, the launch flags, the peers'
records (other machines' words, bounded), and what a node's silence or failure means."""

from __future__ import annotations

import io
import json
import logging
from pathlib import Path

import pytest

from mgpu_tui.engine.launch.command import build_command
from mgpu_tui.engine.launch.spec import LaunchSpec, resolve
from mgpu_tui.engine.machine.host import Host
from mgpu_tui.engine.nodes import watch as watch_module
from mgpu_tui.engine.nodes.endpoint import (
    Endpoint,
    exposure_warning,
    is_this_machine,
    resolve_endpoint,
    route_address,
    split_endpoint,
)
from mgpu_tui.engine.nodes.watch import HEARTBEAT_TIMEOUT_S, PEER_FAILED_GRACE_S, NodeWatch
from mgpu_tui.engine.protocol.heartbeat import NodeFailure, NodeRecord, NodeState, parse_peer
from mgpu_tui.engine.protocol.rundir import RunDir
from mgpu_tui.engine.run.causes.rootcause import RootCause

HOST = Host(cpu_count=8, gpu_count=0, gpu_note="no NVIDIA GPU", torch_available=True)
SPEC = LaunchSpec(
    "ddp",
    nproc=2,
    nnodes=2,
    node_rank=0,
    rdzv_endpoint="127.0.0.1:29400",
    rdzv_id="job",
    device="cpu",
    join_timeout=20,
)


def test_endpoint_parts_and_this_machine():
    assert split_endpoint("bn-host0:29400") == ("bn-host0", 29400)
    assert split_endpoint("[::1]:29400") == ("::1", 29400)
    with pytest.raises(ValueError):
        split_endpoint("bn-host0")
    assert resolve_endpoint("localhost:29400").addresses[0] in ("127.0.0.1", "::1")
    assert is_this_machine("127.0.0.1")
    assert not is_this_machine("192.0.2.7")  # TEST-NET-1: never a machine's own address
    assert route_address(Endpoint("h", 29400, ("127.0.0.1",))) == "127.0.0.1"


def test_a_public_endpoint_is_warned_about_and_a_private_one_is_not():
    assert exposure_warning(Endpoint("h", 29400, ("10.1.2.3",))) is None
    assert exposure_warning(Endpoint("h", 29400, ("127.0.0.1",))) is None
    warning = exposure_warning(Endpoint("h", 29400, ("8.8.8.8",)))
    assert "public address (8.8.8.8)" in warning and "no authentication" in warning


def test_every_torchrun_joins_the_store_as_a_client_and_names_its_route_address():
    launch = build_command(
        resolve(SPEC, HOST),
        RunDir(Path("/runs/r1"), node=0),
        "abc",
        python="/py",
        cpu_count=8,
        base_env={},
        local_addr="10.77.0.1",
    )
    argv = list(launch.argv)
    assert argv[argv.index("--rdzv-conf") + 1] == "is_host=false,join_timeout=80"  # after mgpu-tui's own 20 s
    assert argv[argv.index("--local-addr") + 1] == "10.77.0.1"


def record(**changes) -> dict:
    base = {
        "node": 1,
        "host": "bn-host1",
        "ranks": [2, 3],
        "state": "running",
        "steps": {"2": 7, "3": 8},
        "failure": None,
    }
    return {**base, **changes}


def test_a_peer_record_is_read_with_bounds_and_as_plain_text():
    beat, peer = parse_peer(json.dumps({"beat": 4, "record": record()}), node=1, nnodes=2, world_size=4)
    assert (beat, peer.host, peer.ranks_text(), peer.step) == (4, "bn-host1", "2-3", 7)
    strange = record(host="evil\x1b[31mhost" + "x" * 100)
    _, peer = parse_peer(json.dumps({"beat": 1, "record": strange}), node=1, nnodes=2, world_size=4)
    # cut to 64 characters, then made plain by the one sink: ESC shown as ^[
    assert peer.host == "evil^[[31mhost" + "x" * (64 - 13) and "\x1b" not in peer.host
    for bad in (
        record(node=0),
        record(ranks=[2, 9]),
        record(state="pwned"),
        record(steps={"0": 1}),
        record(steps={"2": -1}),
        record(failure={"headline": 5}),
    ):
        assert parse_peer(json.dumps({"beat": 1, "record": bad}), node=1, nnodes=2, world_size=4) is None
    assert parse_peer("not json", node=1, nnodes=2, world_size=4) is None
    assert parse_peer('{"beat": 1}', node=1, nnodes=2, world_size=4) is None


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def watch(tmp_path, monkeypatch):
    clock = Clock()
    monkeypatch.setattr(watch_module.time, "monotonic", clock)
    node = NodeWatch(resolve(SPEC, HOST), RunDir(tmp_path, node=0), python="/py", log=logging.getLogger("t"))
    node.clock = clock
    node._lines.put({"link": "serving"})
    node.poll()
    return node


def hear(watch: NodeWatch, beat: int, **changes) -> None:
    watch._lines.put({"peers": {"1": json.dumps({"beat": beat, "record": record(**changes)})}, "error": None})
    watch.poll()


def test_a_peer_silent_past_the_heartbeat_timeout_is_a_lost_host(watch):
    assert watch.serve  # 127.0.0.1 is this machine: this node hosts the store
    hear(watch, 1)
    watch.clock.now += HEARTBEAT_TIMEOUT_S - 1
    hear(watch, 1)  # the same beat again: the peer's record is stale, not alive
    assert watch.check() is None
    watch.clock.now += 1.5
    cause = watch.check()
    assert cause.verdict and cause.headline() == (
        "host bn-host1 (node 1, ranks 2-3) stopped answering 6 s ago; last seen at step 7"
    )
    assert [v.state for v in watch.view()] == ["joining", "lost"]


def test_a_peer_that_never_joins_fails_the_node_after_the_join_timeout(watch):
    watch.clock.now += 19
    assert watch.check() is None
    watch.clock.now += 2
    assert (
        watch.check()
        .headline()
        .startswith(
            "node 0 waited 21 s for node 1 of 2 to join the rendezvous at 127.0.0.1:29400 (id job): start"
        )
    )


def test_a_failed_peer_ends_this_node_after_a_grace_and_is_adopted_as_the_cause(watch):
    failure = {
        "rank": 3,
        "headline": "rank 3 on bn-host1 failed first (exit code 1): ValueError: x",
        "hint": None,
        "secondary": False,
    }
    hear(watch, 1, state="failed", failure=failure)
    assert watch.check() is None
    watch.clock.now += PEER_FAILED_GRACE_S
    hear(watch, 2, state="failed", failure=failure)
    cause = watch.check()
    assert cause.rank == 3 and cause.headline() == failure["headline"]


def test_an_echo_of_a_lost_peer_gives_way_to_the_node_that_failed_first(watch, monkeypatch):
    def sleep(seconds: float) -> None:
        watch.clock.now += seconds

    monkeypatch.setattr(watch_module.time, "sleep", sleep)
    failure = {
        "rank": 2,
        "headline": "rank 2 on bn-host1 failed first (SIGSEGV): Segmentation fault",
        "hint": None,
        "secondary": False,
    }
    hear(watch, 1, state="failed", failure=failure)
    echo = RootCause(
        rank=0,
        exit_code=1,
        signal=None,
        message="RuntimeError: Connection closed by peer",
        traceback="",
        host="bn-host0",
    )
    cause = watch.settle(NodeState.FAILED, {0: 5, 1: 5}, echo)
    assert cause.headline() == failure["headline"] and "Connection closed by peer" in cause.traceback
    mine = RootCause(rank=1, exit_code=1, signal=None, message="ValueError: mine", traceback="")
    assert watch.settle(NodeState.FAILED, {}, mine) is mine  # a cause of its own is kept


def test_an_echo_of_a_peer_that_was_stopped_by_its_user_says_so(watch, monkeypatch):
    def sleep(seconds: float) -> None:
        watch.clock.now += seconds

    monkeypatch.setattr(watch_module.time, "sleep", sleep)
    hear(watch, 1, state="interrupted")  # Ctrl-C on host 1: not a failure of its own
    echo = RootCause(
        rank=0,
        exit_code=1,
        signal=None,
        message="RuntimeError: Connection reset by peer",
        traceback="",
        host="bn-host0",
    )
    cause = watch.settle(NodeState.FAILED, {0: 5, 1: 5}, echo)
    assert cause.verdict
    assert cause.headline() == (
        "host bn-host1 (node 1, ranks 2-3) was stopped (interrupted) while the job "
        "ran, which ended the ranks here"
    )


def test_a_node_failure_record_says_whether_it_only_echoes_another():
    r = NodeRecord(0, "h", 0, 1, NodeState.FAILED, {0: 3}, NodeFailure(0, "x", None, secondary=True))
    assert r.to_json()["ranks"] == [0, 1] and r.to_json()["failure"]["secondary"] is True


def test_a_node_that_ended_ok_waits_for_its_peers_final_word_before_its_summary(watch, monkeypatch):
    """CI saw node 1's summary call node 0 "running": a node that does not host the store stopped
    listening as soon as its own record was out. A node that ended ok now hears the others' end
    (bounded by the heartbeat timeout), so every node's summary says how each ended."""

    class Link:  # the node link process, alive: takes this node's record on its stdin
        stdin = io.BytesIO()

        def poll(self):
            return None

    watch._lines.put({"link": "connected"})  # another node hosts the store
    watch.poll()
    assert not watch.serve
    watch._proc = Link()
    hear(watch, 1)  # node 1 (the peer) still running
    beats = iter(range(1, 100))

    def sleep(seconds: float) -> None:  # the link's next lines: its beats, then the peer's end
        watch.clock.now += seconds
        beat = next(beats)
        state = "ok" if beat >= 5 else "running"
        peers = {"1": json.dumps({"beat": 1 + beat, "record": record(state=state)})}
        watch._lines.put({"peers": peers, "error": None, "beat": beat})

    monkeypatch.setattr(watch_module.time, "sleep", sleep)
    assert watch.settle(NodeState.OK, {0: 8, 1: 8}, None) is None
    assert [v.state for v in watch.view()][1] == "ok"
