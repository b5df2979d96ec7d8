"""A node's link to the job's other nodes, through the rendezvous store (a child of the engine).

The engine never imports torch, and torch's TCPStore is what every node of a torchrun job
already reaches, so this small process holds the store for the engine: on the node that hosts
the rendezvous it *is* the store (torchrun on every node then joins it as a client, and the
store outlives this node's torchrun, so a failure can still be told to the others); elsewhere it
is a client. It relays, and decides nothing:

- stdin, from the engine: one JSON line per change of this node's record (the engine's words);
- the store: every ``--beat`` seconds, ``{"beat": N, "record": <latest record>}`` at this node's
  key, so a record that stops changing still shows the node is alive;
- stdout, to the engine: ``{"link": "serving"|"connected"}`` once, ``{"link": "failed", "why": ...}``
  before exiting 1, then every beat ``{"peers": {node: raw value or null}, "error": ...}``.

The peers' values are other machines' words: the engine parses and bounds them (protocol/heartbeat.py).
It exits when stdin closes (the engine is done with it) and, by the parent-death signal the engine
sets, when the engine dies.
"""

from __future__ import annotations

import argparse
import datetime
import json
import select
import sys
import time

MAX_VALUE_BYTES = 16 << 10  # a peer's record; anything longer is not one


def _first_line(exc: BaseException) -> str:
    """torch's store errors carry C++ frames after their first sentence."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text[:300]


def _say(message: dict) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="node_link")
    parser.add_argument("--host", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument(
        "--serve",
        choices=("yes", "no", "try"),
        required=True,
        help="host the store; join it; or host it unless a process here already does",
    )
    parser.add_argument("--key-prefix", required=True)
    parser.add_argument("--node", type=int, required=True)
    parser.add_argument("--nnodes", type=int, required=True)
    parser.add_argument("--join-timeout", type=float, required=True)
    parser.add_argument("--beat", type=float, default=1.0)
    args = parser.parse_args(argv)

    from torch.distributed import TCPStore  # after the arguments: a wrong call fails fast

    store, served = None, False
    if args.serve in ("yes", "try"):
        try:  # the server listens on every interface: torch offers no bind address
            store = TCPStore(
                args.host,
                args.port,
                is_master=True,
                wait_for_workers=False,
                multi_tenant=True,
                timeout=datetime.timedelta(seconds=5),
            )
            served = True
        except Exception as exc:  # noqa: BLE001 (any failure is said to the engine, then we stop)
            if args.serve == "yes" or "EADDRINUSE" not in str(exc):
                _say({"link": "failed", "why": _first_line(exc), "serving": True})
                return 1
    if store is None:
        try:  # retries until the timeout: the hosting node may start later than this one
            store = TCPStore(
                args.host, args.port, is_master=False, timeout=datetime.timedelta(seconds=args.join_timeout)
            )
        except Exception as exc:  # noqa: BLE001
            _say({"link": "failed", "why": _first_line(exc), "serving": False})
            return 1
    # A peer that vanishes must not block a read for long: the engine times the silence.
    store.set_timeout(datetime.timedelta(seconds=max(1.0, args.beat * 2)))
    _say({"link": "serving" if served else "connected"})

    key = f"{args.key_prefix}/node{{}}".format
    record, beat, stdin_open = {}, 0, True
    while stdin_open:
        deadline = time.monotonic() + args.beat
        while (left := deadline - time.monotonic()) > 0:  # the engine's updates, until the next beat
            if not select.select([sys.stdin], [], [], left)[0]:
                break
            line = sys.stdin.readline()
            if not line:
                stdin_open = False
                break
            try:
                record = json.loads(line)
            except ValueError:
                continue  # not the engine's words: keep the last record
        beat += 1
        peers, error = {}, None
        try:
            store.set(key(args.node), json.dumps({"beat": beat, "record": record})[:MAX_VALUE_BYTES])
            for node in range(args.nnodes):
                if node != args.node:
                    found = store.check([key(node)])
                    value = store.get(key(node))[:MAX_VALUE_BYTES] if found else None
                    peers[node] = value.decode("utf-8", "replace") if value is not None else None
        except Exception as exc:  # noqa: BLE001 (the store's host is gone or unreachable: said, and retried)
            error = _first_line(exc)
        _say({"peers": peers, "error": error, "beat": beat})
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (KeyboardInterrupt, BrokenPipeError):
        sys.exit(1)
