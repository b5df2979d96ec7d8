"""Separate hosts on this machine: network namespaces, each with its own address, hostname and
hosts file, joined by a bridge that lives in a namespace of its own.

Nothing outside the namespaces is touched but the two places ``ip netns`` itself keeps them:
``/run/netns/NAME`` and ``/etc/netns/NAME/hosts`` (which ``ip netns exec`` mounts over
``/etc/hosts``). Both go when the hosts are taken down, whatever happened in between, and every
process still in a namespace is killed first. Needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

SUBNET = "10.77.{tag}.{n}"


class HostsUnavailable(Exception):
    """Namespaces cannot be made here; the message says why."""


@dataclass(frozen=True)
class Host:
    netns: str  # the namespace's name under /run/netns
    hostname: str  # what `hostname` says inside, and what the others' hosts files name
    address: str  # a private address that exists only inside the namespaces
    node: int

    def argv(self, *command: str) -> list[str]:
        """``command`` run on this host: its network, its hostname (a UTS namespace), its hosts file."""
        return [
            "ip",
            "netns",
            "exec",
            self.netns,
            "unshare",
            "--uts",
            "--",
            "sh",
            "-c",
            'hostname "$0" && exec "$@"',
            self.hostname,
            *command,
        ]


def _ip(*args: str) -> None:
    result = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=10)
    if result.returncode:
        raise HostsUnavailable(f"`ip {' '.join(args)}` failed: {result.stderr.strip() or result.returncode}")


def why_unavailable() -> str | None:
    """Why separate hosts cannot be made on this machine, or None when they can."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "unshare"):
        if shutil.which(tool) is None:
            return f"`{tool}` is not installed"
    return None


class SeparateHosts:
    """``count`` hosts named ``bn-host0``.. on a private bridge; a context manager."""

    def __init__(self, count: int) -> None:
        self.tag = uuid.uuid4().hex[:6]
        self.subnet_tag = int(self.tag, 16) % 200 + 20
        self.switch = f"mgpu-{self.tag}-sw"
        address = SUBNET.format
        self.hosts = [
            Host(f"mgpu-{self.tag}-h{n}", f"bn-host{n}", address(tag=self.subnet_tag, n=n + 1), n)
            for n in range(count)
        ]

    def why_not(self) -> str | None:
        """Why these hosts cannot be made here, or None (what they run may need more)."""
        return why_unavailable()

    def __enter__(self) -> SeparateHosts:
        reason = self.why_not()
        if reason:
            raise HostsUnavailable(reason)
        try:
            self._make()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _make(self) -> None:
        _ip("netns", "add", self.switch)
        _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.switch, "link", "set", "br0", "up")
        hosts_file = "127.0.0.1 localhost\n" + "".join(f"{h.address} {h.hostname}\n" for h in self.hosts)
        for host in self.hosts:
            _ip("netns", "add", host.netns)
            etc = Path("/etc/netns") / host.netns
            etc.mkdir(parents=True, exist_ok=True)
            (etc / "hosts").write_text(hosts_file)
            port = f"p{self.tag}{host.node}"
            _ip(
                "-n",
                self.switch,
                "link",
                "add",
                port,
                "type",
                "veth",
                "peer",
                "name",
                "eth0",
                "netns",
                host.netns,
            )
            _ip("-n", self.switch, "link", "set", port, "master", "br0")
            _ip("-n", self.switch, "link", "set", port, "up")
            _ip("-n", host.netns, "addr", "add", f"{host.address}/24", "dev", "eth0")
            _ip("-n", host.netns, "link", "set", "eth0", "up")
            _ip("-n", host.netns, "link", "set", "lo", "up")

    def cut(self, host: Host) -> None:
        """Take ``host`` off the network, as a pulled cable or a vanished VM would."""
        _ip("-n", self.switch, "link", "set", f"p{self.tag}{host.node}", "down")

    def pids_in(self, host: Host) -> list[int]:
        result = subprocess.run(
            ["ip", "netns", "pids", host.netns], capture_output=True, text=True, timeout=10
        )
        return [int(p) for p in result.stdout.split()]

    def close(self) -> None:
        for host in self.hosts:
            for _ in range(50):  # whatever still runs on a host dies with it
                pids = self.pids_in(host) if Path("/run/netns", host.netns).exists() else []
                if not pids:
                    break
                for pid in pids:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                time.sleep(0.1)
        for name in [h.netns for h in self.hosts] + [self.switch]:
            if Path("/run/netns", name).exists():
                subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=10)
            shutil.rmtree(Path("/etc/netns") / name, ignore_errors=True)
        try:
            Path("/etc/netns").rmdir()  # only if no one else keeps a namespace's files there
        except OSError:
            pass
