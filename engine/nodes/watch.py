"""Each node's watch over the job's other nodes, through the rendezvous store they all reach.

When a job spans nodes, a node that vanishes (power, network, a preempted VM, a killed
mgpu-tui) leaves the others waiting in a collective: gloo until its timeout, NCCL until its
watchdog (ten minutes by default), the stall watch for 30 s, and none of them says which host
went. So every node's engine keeps a record in the store (protocol/heartbeat.py) through its
link process (rank/node_link.py), which beats every second, and reads the others':

- before the ranks start: this node hosts the store when the endpoint is one of its own
  addresses (endpoint.py), else joins it; one that cannot, or whose peers never arrive within
  ``--join-timeout``, fails with a sentence that names what is missing;
- while they run: a peer silent for HEARTBEAT_TIMEOUT_S is a lost host, and a peer that failed
  ends this node too after PEER_FAILED_GRACE_S (NCCL would otherwise wait for its watchdog);
- at the end (:meth:`NodeWatch.settle`): this node's outcome is published, and a failure that only
  echoes another's (a lost peer) gives way to the node that failed first, named with its host.

The node that hosts the store keeps it until the others have read its outcome, or are gone.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import socket
import subprocess
import threading
import time

from mgpu_tui.engine.launch.keeper import term_when_parent_dies
from mgpu_tui.engine.launch.spec import ResolvedSpec
from mgpu_tui.engine.nodes.endpoint import hosts_here, resolve_endpoint, route_address
from mgpu_tui.engine.nodes.view import LOST_HINT, NodeView, Peer, node_verdict
from mgpu_tui.engine.protocol.causes import RootCause, is_consequence
from mgpu_tui.engine.protocol.environment import RUN_ID_ENV
from mgpu_tui.engine.protocol.folder import dumps as strict_json
from mgpu_tui.engine.protocol.heartbeat import NodeFailure, NodeRecord, NodeState, parse_peer
from mgpu_tui.engine.protocol.rundir import RunDir

LINK_MODULE = "mgpu_tui.engine.rank.node_link"
BEAT_S = 1.0
HEARTBEAT_TIMEOUT_S = 6.0  # a peer whose beat has not grown for this long has stopped answering
PEER_FAILED_GRACE_S = 3.0  # a peer failed: this node's ranks get this long to notice on their own
PUBLISH_EVERY_S = 1.0


class NodeWatch:
    def __init__(
        self,
        resolved: ResolvedSpec,
        run_dir: RunDir,
        *,
        python: str,
        log: logging.LoggerAdapter | logging.Logger,
    ) -> None:
        spec = resolved.spec
        self.resolved, self.run_dir, self.python, self.log = resolved, run_dir, python, log
        if spec.rdzv_endpoint is None:
            raise ValueError("several nodes meet at an endpoint (resolve() requires one)")
        self.endpoint = resolve_endpoint(spec.rdzv_endpoint)  # resolve() has checked that it resolves
        self.serve = hosts_here(self.endpoint)
        self.local_addr = route_address(self.endpoint)
        self.node, self.nnodes = spec.node_rank, spec.nnodes
        self.join_timeout = spec.join_timeout
        ranks = resolved.ranks_here
        host = socket.gethostname()[:64]
        self._record = NodeRecord(self.node, host, ranks.start, ranks.stop - 1, NodeState.JOINING)
        self._published: str | None = None
        self._published_at = 0.0
        self._peers: dict[int, Peer] = {}
        self._lines: queue.SimpleQueue[dict | None] = queue.SimpleQueue()
        self._proc: subprocess.Popen | None = None
        self._peer_failed_seen: float | None = None
        self.status = "starting"  # starting, serving, connected, failed
        self.why: str | None = None  # the link's failure, in its words
        self.ready_at: float | None = None
        self.store_error: str | None = None
        self._beat = 0
        self._link_heard_at = 0.0  # time.monotonic() of the link's last report

    # ---- the link ---------------------------------------------------------------------

    def start(self) -> None:
        ep, job = self.endpoint, self.resolved.spec.rdzv_id or "mgpu-tui"
        argv = [
            self.python,
            "-m",
            LINK_MODULE,
            "--host",
            ep.host,
            "--port",
            str(ep.port),
            "--serve",
            "try" if self.serve else "no",
            "--node",
            str(self.node),
            "--nnodes",
            str(self.nnodes),
            "--key-prefix",
            f"mgpu-tui/{job}",
            "--join-timeout",
            str(self.join_timeout),
            "--beat",
            str(BEAT_S),
        ]
        # Not tagged with the run's id: the sweep at the launcher's end must leave it to settle().
        env = {k: v for k, v in os.environ.items() if k != RUN_ID_ENV}
        with open(self.run_dir.link_log, "ab") as err:
            self._proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                env=env,
                preexec_fn=term_when_parent_dies,
            )
        threading.Thread(target=self._read_link, name="mgpu-node-link", daemon=True).start()
        self.log.info(
            "node link pid %d: %s the rendezvous store at %s",
            self._proc.pid,
            "hosting" if self.serve else "joining",
            self.endpoint.text,
        )

    def _read_link(self) -> None:
        out = self._proc.stdout if self._proc is not None else None
        for line in out or ():  # our own child's words: still parsed with care
            try:
                message = json.loads(line[: 1 << 20])
            except ValueError:
                continue
            if isinstance(message, dict):
                self._lines.put(message)
        self._lines.put(None)

    def poll(self) -> None:
        """Take in what the link said since the last poll (never blocks)."""
        while True:
            try:
                message = self._lines.get_nowait()
            except queue.Empty:
                return
            self._link_heard_at = time.monotonic()
            if message is None:  # the link ended
                if self.status != "failed" and self.ready_at is None:
                    self.status, self.why = "failed", self.why or "the link process ended"
                continue
            if message.get("link") in ("serving", "connected"):
                self.status, self.ready_at = message["link"], time.monotonic()
                self.serve = self.status == "serving"  # another node on this machine may host it
                self.log.info("node link %s", self.status)
            elif message.get("link") == "failed":
                self.status, self.why = "failed", str(message.get("why"))[:300]
            elif isinstance(message.get("peers"), dict):
                self._take_peers(message["peers"])
                self.store_error = message.get("error") if isinstance(message.get("error"), str) else None
                if self.store_error is None and isinstance(message.get("beat"), int):
                    self._beat = message["beat"]  # the link wrote our record this many times

    def _take_peers(self, peers: dict) -> None:
        now = time.monotonic()
        for key, raw in peers.items():
            node = int(key) if str(key).isdigit() else -1
            if not 0 <= node < self.nnodes or node == self.node:
                continue
            parsed = parse_peer(
                raw if isinstance(raw, str) else None,
                node=node,
                nnodes=self.nnodes,
                world_size=self.resolved.ranks,
            )
            if parsed is None:
                continue
            beat, record = parsed
            known = self._peers.get(node)
            if known is None or beat != known.beat:
                if known is None:
                    self.log.info("node %d (%s, ranks %s) joined", node, record.host, record.ranks_text())
                self._peers[node] = Peer(record, beat, now)

    def role(self) -> str:
        job = self.resolved.spec.rdzv_id or "mgpu-tui"
        what = "hosts the rendezvous store at" if self.serve else "joins the rendezvous at"
        return (
            f"node {self.node} of {self.nnodes} ({self._record.host}, ranks {self._record.ranks_text()}) "
            f"{what} {self.endpoint.text} (id {job})"
        )

    @property
    def ready(self) -> bool:
        return self.ready_at is not None

    def publish_due(self) -> bool:
        """Whether a running node's record is due again (at most once a PUBLISH_EVERY_S)."""
        return time.monotonic() - self._published_at >= PUBLISH_EVERY_S

    def publish(
        self,
        state: NodeState,
        steps: dict[int, int],
        failure: NodeFailure | None = None,
        *,
        force: bool = False,
    ) -> None:
        """This node's record, for the others (at most once a PUBLISH_EVERY_S unless it is final)."""
        self._record = NodeRecord(
            self._record.node,
            self._record.host,
            self._record.first_rank,
            self._record.last_rank,
            state,
            dict(steps),
            failure,
        )
        line = strict_json(self._record.to_json())
        if self._proc is None or self._proc.poll() is not None or line == self._published:
            return
        if not force and not self.publish_due():
            return
        stdin = self._proc.stdin
        if stdin is None:
            return
        try:
            stdin.write((line + "\n").encode())
            stdin.flush()
            self._published, self._published_at = line, time.monotonic()
        except OSError:
            pass

    # ---- what the others' silence or words mean ------------------------------------------

    def failure_to_start(self) -> RootCause | None:
        """The link could not host or reach the store: the run cannot start."""
        if self.status != "failed":
            return None
        ep = self.endpoint
        if self.serve:
            message = (
                f"node {self.node} could not host the rendezvous at {ep.text} ({self.why}): another "
                f"program may hold port {ep.port} here; choose another port in --rdzv-endpoint, the "
                "same on every node."
            )
        else:
            message = (
                f"node {self.node} could not reach the rendezvous at {ep.text} within "
                f"{self.join_timeout:.0f} s ({self.why}): start the node that hosts it, and check "
                f"that {ep.host} resolves here to that node's address and that port {ep.port} is open "
                "to this host (a firewall); every node needs the same --rdzv-endpoint."
            )
        return node_verdict(message)

    def check(self) -> RootCause | None:
        """While this node's ranks run (or wait to join): a verdict that must end the run, else None."""
        now = time.monotonic()
        if self.ready_at is not None and now - self.ready_at >= self.join_timeout:
            missing = [n for n in range(self.nnodes) if n != self.node and n not in self._peers]
            if missing:
                return node_verdict(self._missing_sentence(missing, now - self.ready_at))
        if lost := self._lost(now):
            return node_verdict(lost, LOST_HINT)
        failed = self._first_failed_peer()
        if failed is None:
            self._peer_failed_seen = None
        elif self._peer_failed_seen is None:
            self._peer_failed_seen = now
        elif now - self._peer_failed_seen >= PEER_FAILED_GRACE_S and failed.failure is not None:
            return self._adopt(failed.failure, None)
        return None

    def _missing_sentence(self, missing: list[int], waited: float) -> str:
        which = "node " + ", ".join(str(n) for n in missing) if len(missing) <= 3 else f"{len(missing)} nodes"
        ep, job = self.endpoint, self.resolved.spec.rdzv_id or "mgpu-tui"
        return (
            f"node {self.node} waited {waited:.0f} s for {which} of {self.nnodes} to join the rendezvous "
            f"at {ep.text} (id {job}): start `mgpu-tui run` on every node with the same --rdzv-endpoint, "
            f"--rdzv-id and --nnodes, and check that each reaches {ep.text} (name resolution, "
            "firewall)."
        )

    def _lost(self, now: float) -> str | None:
        lost = [
            p for p in self._peers.values() if not p.record.final and now - p.heard_at >= HEARTBEAT_TIMEOUT_S
        ]
        if not lost:
            return None
        parts = []
        for peer in sorted(lost, key=lambda p: p.record.node):
            r = peer.record
            seen = f"; last seen at step {r.step}" if r.step is not None else "; it had reported no step"
            parts.append(
                f"host {r.host} (node {r.node}, ranks {r.ranks_text()}) stopped answering "
                f"{now - peer.heard_at:.0f} s ago{seen}"
            )
        return "; ".join(parts)

    def _first_failed_peer(self) -> NodeRecord | None:
        failed = [
            p.record for p in self._peers.values() if p.record.state is NodeState.FAILED and p.record.failure
        ]
        primary = [r for r in failed if r.failure is not None and not r.failure.secondary]
        return min(primary or failed, key=lambda r: r.node) if failed else None

    def _adopt(self, f: NodeFailure, own: RootCause | None) -> RootCause:
        here = f"on this node ({self._record.host}): {own.describe()}" if own else ""
        return RootCause(
            rank=f.rank,
            exit_code=None,
            signal=None,
            message=f.headline,
            traceback=here,
            hint=f.hint,
            verdict=True,
            kind="node",
        )

    # ---- the end ----------------------------------------------------------------------

    def settle(self, state: NodeState, steps: dict[int, int], own: RootCause | None) -> RootCause | None:
        """Publish this node's outcome; hear the others' (waiting while one may still speak, at most
        HEARTBEAT_TIMEOUT_S and a beat); return the root cause to report for this node."""
        failure = None
        if own is not None:
            failure = NodeFailure(own.rank, own.headline(), own.hint, secondary=is_consequence(own))
        self.publish(state, steps, failure, force=True)
        if not self.ready:
            return own
        deadline = time.monotonic() + HEARTBEAT_TIMEOUT_S + BEAT_S
        # The link writes our record at its next beat; a second beat is sure to carry the final one.
        published_beat = self._beat + 2
        # The store's server stays for its peers; a node that ended ok waits (bounded) for the others'
        # final word too, so its summary says how each ended ("ok", not the "running" last heard: a
        # synchronous job's nodes end within moments of each other).
        needs_peers = self.serve or state is NodeState.OK or (failure is not None and failure.secondary)
        while time.monotonic() < deadline:
            self.poll()
            link_quiet = time.monotonic() - self._link_heard_at > BEAT_S * 2.5  # blocked on a store gone
            link_gone = self._proc is None or self._proc.poll() is not None
            if self.store_error is not None or link_quiet or link_gone:
                break  # the store is out of reach: nobody can hear this node now, nor it them
            now = time.monotonic()
            waiting = [
                p
                for p in self._peers.values()
                if not p.record.final and now - p.heard_at < HEARTBEAT_TIMEOUT_S
            ]
            if self._beat >= published_beat and (not needs_peers or not waiting):
                break
            time.sleep(0.1)
        if own is None or not is_consequence(own):
            return own
        failed = self._first_failed_peer()
        if failed is not None and failed.failure is not None and not failed.failure.secondary:
            return self._adopt(failed.failure, own)
        if lost := self._lost(time.monotonic()):
            return node_verdict(lost, LOST_HINT, own=own)
        stopped = [p.record for p in self._peers.values() if p.record.state is NodeState.INTERRUPTED]
        if stopped:
            r = min(stopped, key=lambda r: r.node)
            message = (
                f"host {r.host} (node {r.node}, ranks {r.ranks_text()}) was stopped (interrupted) "
                "while the job ran, which ended the ranks here"
            )
            return node_verdict(message, own=own)
        return own

    def view(self) -> tuple[NodeView, ...]:
        now = time.monotonic()
        per_node = self.resolved.ranks // self.nnodes
        rows = []
        for node in range(self.nnodes):
            if node == self.node:
                rows.append(NodeView.heard(node, self._record, silent_s=None, here=True))
            elif (peer := self._peers.get(node)) is None:
                state = NodeState.MISSING if self.ready else NodeState.JOINING
                first = node * per_node
                rows.append(NodeView.unheard(node, first, first + per_node - 1, state))
            else:
                r, silent = peer.record, now - peer.heard_at
                state = NodeState.LOST if not r.final and silent >= HEARTBEAT_TIMEOUT_S else r.state
                rows.append(NodeView.heard(node, r, silent_s=silent, here=False, state=state))
        return tuple(rows)

    def close(self) -> None:
        """End the link (the store with it, on the hosting node)."""
        if self._proc is None:
            return
        try:
            if self._proc.stdin is not None:
                self._proc.stdin.close()
        except OSError:
            pass
        try:  # its last beat done, it has nothing left to say: a store op that hangs is not waited for
            self._proc.wait(timeout=0.5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        if self._proc.stdout is not None:
            self._proc.stdout.close()
