"""The rendezvous endpoint, read before anything waits on it: which addresses it names, whether
one of them is this machine (then this node hosts the store, whatever its hostname says), the
address this node reaches it from, and whether the store would be open to the internet.

Pure standard library and a few system calls (getaddrinfo, bind, a UDP connect that sends
nothing), so it runs in the CLI and the engine alike.
"""

from __future__ import annotations

import errno
import ipaddress
import socket
from dataclasses import dataclass


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int
    addresses: tuple[str, ...]  # what the host resolves to here, in getaddrinfo's order

    @property
    def text(self) -> str:
        return f"{self.host}:{self.port}"


def split_endpoint(text: str) -> tuple[str, int]:
    """HOST:PORT (or [IPv6]:PORT) -> (host, port); ValueError when it is not one."""
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(text)
    return host.strip("[]"), int(port)


def resolve_endpoint(text: str) -> Endpoint:
    """The endpoint with its addresses (socket.gaierror when its host resolves nowhere)."""
    host, port = split_endpoint(text)
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    addresses = tuple(dict.fromkeys(str(info[4][0]) for info in infos))
    return Endpoint(host, port, addresses)


def is_this_machine(address: str) -> bool:
    """Whether ``address`` is one of this machine's: only then can a socket bind to it.

    This is what torch's hostname heuristic misses: a container or a host whose name does not
    resolve to the address the endpoint gives still owns that address."""
    if ipaddress.ip_address(address.split("%")[0]).is_loopback:
        return True
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((address, 0))
        except OSError as exc:
            if exc.errno == errno.EADDRNOTAVAIL:
                return False
            raise
    return True


def hosts_here(endpoint: Endpoint) -> bool:
    return any(is_this_machine(address) for address in endpoint.addresses)


def route_address(endpoint: Endpoint) -> str | None:
    """The address of this machine that packets to the endpoint leave from (None: no route).

    torchrun publishes it as the workers' MASTER_ADDR on node 0 (``--local-addr``), so the other
    nodes need not resolve node 0's hostname. A UDP connect picks the route and sends nothing."""
    for address in endpoint.addresses:
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            try:
                probe.connect((address, endpoint.port))
            except OSError:
                continue
            return probe.getsockname()[0]
    return None


def exposure_warning(endpoint: Endpoint) -> str | None:
    """A sentence when the store would listen where the internet can reach it, else None."""
    public = [a for a in endpoint.addresses if ipaddress.ip_address(a.split("%")[0]).is_global]
    if not public:
        return None
    return (
        f"warning: the rendezvous endpoint {endpoint.text} is a public address ({public[0]}): the store "
        "that the node hosting it opens listens on every interface of that node, with no authentication; "
        "keep the job on a private network, or close the port to everyone but the job's nodes."
    )
