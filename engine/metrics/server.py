"""``--metrics-port``: the run's figures served in Prometheus' text exposition format at ``/metrics``,
from the node's monitor process alone (nothing runs in the ranks, and no multiprocess mode: a job may
use ``PROMETHEUS_MULTIPROC_DIR`` or port 8000 itself).

The thread that polls the run (the CLI's, or the app's run thread) calls :meth:`MetricsServer.publish`
after its polls: at most every PUBLISH_S it takes a frozen snapshot of the run (snapshot.py) and
puts it in place with one assignment. A scrape, on the server's own threads, reads whichever
snapshot is in place and turns it into text (families.py): it never takes a lock the monitor holds,
never touches the run, and never sees half of an update. prometheus_client compresses the answer
when the scraper asks (``Accept-Encoding: gzip``).

Once the run has ended the endpoint keeps its final snapshot for ``linger_s`` (DEFAULT_LINGER_S:
two scrapes at Prometheus' usual 15 s, and a margin), so that a crash's final state reaches
Prometheus; then it closes.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, ProcessCollector, make_wsgi_app
from prometheus_client.core import Metric

from mgpu_tui.engine.launch.errors import EnvironmentUnusable
from mgpu_tui.engine.metrics.families import families
from mgpu_tui.engine.metrics.snapshot import Identity, Snapshot, identify, take
from mgpu_tui.engine.records.follow import FollowedRun
from mgpu_tui.engine.run.figures.aggregate import RunStats
from mgpu_tui.engine.run.lifecycle import Run

log = logging.getLogger(__name__)

PUBLISH_S = 1.0  # a snapshot at most this often while the run goes (scrapes come every second at most)
PUBLISH_SHARE = 0.2  # and at most this share of the polling thread's time (a job of thousands of ranks)
DEFAULT_LINGER_S = 35.0  # after the run's end: two scrapes 15 s apart, whatever their phase, and 5 s
PATH = "/metrics"


class _Collector:
    """The registry's view of the server: the snapshot in place, as metric families."""

    def __init__(self, server: MetricsServer) -> None:
        self._server = server

    def collect(self) -> list[Metric]:
        snap = self._server.snapshot  # one read of one reference: this scrape's, whole
        return families(snap) if snap is not None else []


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (the base class's name)
        """No line on stderr a scrape: the console is the run's."""


class _Threading(ThreadingMixIn, WSGIServer):
    """A thread a request: a slow scraper never holds up another, nor the monitor."""

    daemon_threads = True

    def handle_error(self, request, client_address) -> None:  # noqa: ANN001 (socketserver's)
        """Nothing on stderr: a scraper that hangs up mid-answer is not the run's news."""


class MetricsServer:
    """The endpoint of one monitor: :meth:`start` binds it (EnvironmentUnusable, in one sentence,
    when it cannot), :meth:`publish` feeds it from the polling thread, :meth:`linger` keeps it after
    the run's end, :meth:`close` ends it."""

    def __init__(self, port: int, address: str = "127.0.0.1", linger_s: float = DEFAULT_LINGER_S) -> None:
        self.port, self.address, self.linger_s = port, address, linger_s
        self.snapshot: Snapshot | None = None  # replaced whole by publish(); read whole by a scrape
        self._identity: Identity | None = None
        self._run: Run | FollowedRun | None = None
        self._published_at = 0.0
        self._every = PUBLISH_S  # longer where taking a snapshot is slow (PUBLISH_SHARE)
        self.errors = 0  # snapshots that failed (logged; the run goes on, the last one stays served)
        self._ended_at: float | None = None
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_Collector(self))
        ProcessCollector(registry=self.registry)  # the monitor's own CPU and memory: process_*

    @property
    def url(self) -> str:
        host = f"[{self.address}]" if ":" in self.address else self.address
        return f"http://{host}:{self.port}{PATH}"

    def start(self) -> None:
        """Bind and serve, on a daemon thread of its own."""
        try:
            family = socket.getaddrinfo(self.address, self.port, type=socket.SOCK_STREAM)[0][0]
        except (OSError, UnicodeError) as exc:
            raise EnvironmentUnusable(
                f"--metrics-address {self.address}: no such address here ({_why(exc)})."
            ) from None
        server_class = type("_Server", (_Threading,), {"address_family": family})
        app = make_wsgi_app(self.registry)

        def only_metrics(environ, start_response):  # noqa: ANN001, ANN202 (WSGI's)
            if environ.get("PATH_INFO", "/") not in (PATH, "/"):
                start_response("404 Not Found", [("Content-Type", "text/plain")])
                return [f"the metrics are at {PATH}\n".encode()]
            return app(environ, start_response)

        try:
            self._server = make_server(self.address, self.port, only_metrics, server_class, _Quiet)
        except OSError as exc:
            raise EnvironmentUnusable(
                f"--metrics-port {self.port}: cannot serve metrics on {self.address}:{self.port} "
                f"({_why(exc)}): choose another port (or address)."
            ) from None
        self.port = self._server.server_port
        self._thread = threading.Thread(target=self._server.serve_forever, name="mgpu-metrics", daemon=True)
        self._thread.start()

    def publish(self, run: Run | FollowedRun, *, force: bool = False, stats: RunStats | None = None) -> None:
        """On the thread that owns ``run``: a new snapshot when one is due (every PUBLISH_S, less
        often where taking one costs more than PUBLISH_SHARE of the time; and once more as the run
        ends), put in place in one assignment. ``stats``: the run's figures, where the caller has
        just read them."""
        now = time.monotonic()
        finished = run.state.finished
        if run is self._run and finished and self._ended_at is not None and not force:
            return  # its final snapshot is in place already
        if run is self._run and not force and not finished and now - self._published_at < self._every:
            return
        try:
            if run is not self._run:  # a new run (the app's): who it is, once
                self._run, self._identity, self._ended_at = run, None, None
            if self._identity is None:
                self._identity = identify(run)
            self.snapshot = take(run, self._identity, stats=stats)
        except Exception:  # a bug here must never touch the run: the last snapshot stays served
            self.errors += 1
            if self.errors in (1, 10) or self.errors % 100 == 0:
                log.exception("taking the metrics' snapshot failed (%d so far)", self.errors)
            return
        finally:
            self._published_at = time.monotonic()
        self._every = max(PUBLISH_S, (self._published_at - now) / PUBLISH_SHARE)
        if finished and self._ended_at is None:
            self._ended_at = now

    def linger(self) -> float:
        """Block until ``linger_s`` has passed since the run's end (its final snapshot served all
        along); the seconds waited. KeyboardInterrupt (Ctrl-C, SIGTERM) ends it early."""
        if self._ended_at is None or self._server is None:
            return 0.0
        left = self._ended_at + self.linger_s - time.monotonic()
        if left > 0:
            time.sleep(left)
        return max(0.0, left)

    def close(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)


def _why(exc: BaseException) -> str:
    return getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
