"""A real Prometheus (Debian's ``prometheus``, which CI installs) for the tests: started on loopback
with its own configuration and data folder, scraping the given targets every second, and asked
through its HTTP API as a dashboard asks it."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path

from waiting import wait_until

SCRAPE_S = 1


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Prometheus:
    """Its targets come as docs/multi-node.md's Slurm job gives them: a file of file_sd_configs,
    each target labelled with its job (here ``slurm_job="test"``)."""

    def __init__(self, folder: Path, targets: list[str]) -> None:
        binary = shutil.which("prometheus")
        assert binary, (
            "Debian's prometheus is not installed (apt-get install --no-install-recommends prometheus)"
        )
        folder.mkdir(parents=True, exist_ok=True)
        config = folder / "prometheus.yml"
        config.write_text(
            "global:\n"
            f"  scrape_interval: {SCRAPE_S}s\n"
            f"  scrape_timeout: {SCRAPE_S}s\n"
            "scrape_configs:\n"
            "  - job_name: mgpu-tui\n"
            "    file_sd_configs:\n"
            f'      - files: ["{folder}/targets/*.json"]\n'
        )
        (folder / "targets").mkdir()
        (folder / "targets" / "job.json").write_text(
            json.dumps([{"labels": {"slurm_job": "test"}, "targets": targets}])
        )
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(folder / "prometheus.log", "w")  # noqa: SIM115 (closed in stop)
        self.proc = subprocess.Popen(
            [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={folder / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--log.level=warn",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        ready = wait_until(self._ready, 60, every=0.2)
        assert ready, f"prometheus did not start: {(folder / 'prometheus.log').read_text()[-2000:]}"

    def _ready(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"prometheus exited with {self.proc.returncode}")
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as answer:
                return answer.status == 200
        except OSError:
            return False

    def api(self, path: str, **params: object) -> list:
        query = urllib.parse.urlencode({k: str(v) for k, v in params.items()})
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{query}", timeout=30) as answer:
            document = json.loads(answer.read())
        assert document["status"] == "success", document
        return document["data"]["result"] if isinstance(document["data"], dict) else document["data"]

    def values(self, query: str, start: float, end: float) -> list[tuple[dict, list[tuple[float, float]]]]:
        """Every series of ``query`` over [start, end], at each second: (its labels, [(t, value)])."""
        found = self.api("query_range", query=query, start=start, end=end, step=SCRAPE_S)
        return [(r["metric"], [(float(t), float(v)) for t, v in r["values"]]) for r in found]

    def latest(self, selector: str) -> dict[tuple, float]:
        """Each series' last value within the last ten minutes (``selector``: a metric and its
        labels): its labels, less the name (sorted items) -> value."""
        found = self.api("query", query=f"last_over_time({selector}[10m])")
        return {
            tuple(sorted((k, v) for k, v in r["metric"].items() if k != "__name__")): float(r["value"][1])
            for r in found
        }

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def wait_for_scrapes(prometheus: Prometheus, query: str, timeout: float = 30) -> bool:
    """Wait until ``query`` has an answer: the target has been scraped since it appeared."""
    return bool(wait_until(lambda: prometheus.api("query", query=query), timeout, every=0.5))
