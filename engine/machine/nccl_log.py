"""NCCL's own account of a job (``NCCL_DEBUG=INFO``), read back: which transport it chose between
each pair of ranks, its channels, rings and trees, its version, the hosts and their ranks, and
its warnings and errors, each with what it means.

NCCL's lines look like ``host:pid:tid [dev] NCCL INFO message`` (``file.cc:line NCCL WARN`` for
warnings), but real logs are messier: launchers prefix every line (Ray's ``(RayWorkerWrapper
pid=.., ip=..)``, MPI's ``[1,0]<stdout>:``, timestamps), ranks interleave, old NCCL versions
print other forms (busIds in place of device numbers, no ``/connIndex``, trees with ``|``), and
forwarded lines arrive cut. So each line is searched for NCCL's own part wherever it starts,
every field is optional, and what cannot be read is skipped, never fatal.

The reference for the forms: NCCL's source (init.cc, transport/*.cc, graph/*.cc) and the real
logs of tests/fixtures/nccl (their SOURCES.md gives each one's source and expected reading).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field

# NCCL's part of a line, wherever it starts: host:pid:tid [dev] (source:line )NCCL LEVEL message
_LINE = re.compile(
    r"(?P<host>[A-Za-z0-9][\w.-]{0,252}):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] "
    r"(?:(?P<src>[\w/.-]+:\d+) )?NCCL (?P<level>INFO|WARN|TRACE) ?(?P<msg>.*)"
)
_VERSION = re.compile(r"NCCL version (?P<v>\d+\.\d+\.\d+\S*)")
_INIT = re.compile(
    r"comm (?P<comm>0x[0-9a-f]+) rank (?P<rank>\d+) nranks (?P<nranks>\d+) "
    r"cudaDev (?P<dev>\d+)(?: nvmlDev \d+)? busId (?P<bus>[0-9a-f]+)"
    r"(?: commId (?P<id>0x[0-9a-f]+))?.* - Init (?P<state>START|COMPLETE)"
)
_SHAPE = re.compile(
    r"comm (?P<comm>0x[0-9a-f]+) rank (?P<rank>\d+) nRanks (?P<nranks>\d+) "
    r"nNodes (?P<nnodes>\d+) localRanks (?P<local>\d+)"
)
_RING = re.compile(r"^Channel (?P<ch>\d+)/(?P<of>\d+) :\s+(?P<order>\d+(?:\s+\d+)*)\s*$")
_CONNECT = re.compile(
    r"^Channel (?P<ch>\d+)(?:/\d+)? : (?P<src>\d+)\[(?P<sdev>[0-9a-f]+)\] -> "
    r"(?P<dst>\d+)\[(?P<ddev>[0-9a-f]+)\](?: \[(?P<dir>send|receive)\])? "
    r"via (?P<via>.+?)\s*$"
)
_CHANNELS = re.compile(
    r"(?P<coll>\d+) coll channels, (?:(?P<collnet>\d+) collnet channels, )?"
    r"(?:(?P<nvls>\d+) nvls channels, )?(?P<p2p>\d+) p2p channels, "
    r"(?P<peer>\d+) p2p channels per peer"
)
_ENV = re.compile(r"^(?P<name>NCCL_\w+) set by environment to (?P<value>.*?)\.?\s*$")
_NETWORK = re.compile(r"^Using network (?P<net>\S+)")
_CHAIN = re.compile(r"^(?P<where>[\w/.-]+\.cc:\d+) -> (?P<code>\d+)")
_ERROR = re.compile(r"(?:NCCL error|Test NCCL failure)\b.*")

MAX_LINE = 8192
# A log may be anyone's (a rank writes it): what is kept of it is bounded, so reading stays linear.
MAX_KEPT = 100  # versions, errors, distinct warnings, networks, environment variables
MAX_MANY = 65_536  # hosts, communicators, links, rings
MAX_CHANNELS = 256  # of one link (NCCL uses at most 64)

# ncclResult_t, as nccl.h numbers them.
RESULTS = {
    1: "ncclUnhandledCudaError",
    2: "ncclSystemError",
    3: "ncclInternalError",
    4: "ncclInvalidArgument",
    5: "ncclInvalidUsage",
    6: "ncclRemoteError",
    7: "ncclInProgress",
}

# What a warning means, for the ones users meet: (pattern, meaning); BENIGN ones do not stop a job.
MEANINGS = (
    (
        r"libibverbs",
        "no InfiniBand verbs library here: NCCL cannot use InfiniBand/RoCE and falls back to sockets "
        "between nodes (harmless on a single node or an Ethernet-only cluster)",
    ),
    (
        r"CUDA driver is a stub",
        "the libcuda.so found is the CUDA toolkit's stub, not the driver's: a 'stubs' folder is on "
        "LD_LIBRARY_PATH; remove it",
    ),
    (
        r"Could not find a path for pattern",
        "NCCL found no better graph for this pattern and uses a simple ring order (common on consumer "
        "GPUs without P2P; usually harmless)",
    ),
    (
        r"neither AF_INET\(2\) nor AF_INET6\(10\)",
        "NCCL tried to connect a socket to an address that is neither IPv4 nor IPv6: the peer's address "
        "exchange went wrong (a bootstrap or send/recv ordering problem)",
    ),
    (
        r"Cuda failure",
        "a CUDA call failed inside NCCL: the GPU, the driver or the kernel's resources (see the CUDA "
        "error it names)",
    ),
    (
        r"NET/IB.*(?:Got completion|error)",
        "an InfiniBand transfer failed: a link, a switch or a peer went away; check `ibstat` and the "
        "peer's logs",
    ),
    (
        r"[Tt]imeout|timed out",
        "a peer did not answer in time: it is slow, hung or gone; look at the other ranks first",
    ),
)


BENIGN = (r"libibverbs", r"Could not find a path for pattern")


def transport_kind(via: str) -> str:
    """The transport family of a connection's ``via`` text: P2P/IPC, P2P/CUMEM, P2P/direct pointer,
    SHM, NET/Socket, NET/IB (with GDRDMA when GPU memory goes straight to the NIC), NVLS, CollNet."""
    text = via.strip()
    if text.startswith("P2P/CUMEM"):
        return "P2P/CUMEM"
    if text.startswith("P2P/IPC"):
        return "P2P/IPC"
    if text.startswith("P2P/direct pointer"):
        return "P2P/direct pointer"
    if text.startswith("P2P"):
        return "P2P"
    if text.startswith("SHM") or "shared memory" in text:
        return "SHM"
    if text.startswith("NET/IB"):
        return "NET/IB with GDRDMA" if "GDRDMA" in text else "NET/IB"
    if text.startswith("NET/Socket"):
        return "NET/Socket"
    if text.startswith("NET/"):  # a network plugin: NET/<its name>
        return "NET/" + text.split("/")[1]
    if text.startswith("NVLS"):
        return "NVLS"
    if "CollNet" in text:
        return "CollNet"
    return text.split("/")[0] or "unknown"


@dataclass
class Communicator:
    host: str
    pid: int
    comm: str  # NCCL's pointer for it in that process
    comm_id: str | None  # the id every member shares (newer NCCL)
    rank: int
    nranks: int
    cuda_dev: int | None = None
    bus_id: str | None = None
    nnodes: int | None = None  # as NCCL says (it counts hosts by their host hash)
    local_ranks: int | None = None
    complete: bool = False  # Init COMPLETE seen


@dataclass
class Link:
    host: str
    src: int
    dst: int
    kind: str  # transport_kind()
    via: str  # NCCL's words
    direction: str | None  # send / receive (across nodes), None within one
    channels: list[int] = field(default_factory=list)


@dataclass
class Warning_:
    host: str
    source: str | None
    message: str
    count: int = 1
    meaning: str | None = None
    benign: bool = False  # seen on healthy jobs: not the reason anything failed


@dataclass
class NcclReading:
    versions: list[str] = field(default_factory=list)
    hosts: dict[str, dict] = field(default_factory=dict)  # host -> {"pids": [...], "ranks": [...]}
    communicators: list[Communicator] = field(default_factory=list)
    rings: dict[str, list[int]] = field(default_factory=dict)  # "host:pid" -> the ring's rank order
    ring_channels: int | None = None
    channel_counts: dict[str, int] | None = None  # coll, collnet, nvls, p2p, p2p per peer
    links: list[Link] = field(default_factory=list)
    networks: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    warnings: list[Warning_] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    lines: int = 0
    nccl_lines: int = 0

    @property
    def transports(self) -> list[str]:
        return sorted({link.kind for link in self.links})

    @property
    def init_complete(self) -> int:
        return sum(1 for c in self.communicators if c.complete)

    def ranks(self) -> int | None:
        return max((c.nranks for c in self.communicators), default=None)

    def summary(self) -> str:
        """The reading in one line: ranks and hosts, transports with their pairs, channels,
        version, inits, then the first warning or error that matters."""
        parts = []
        nranks = self.ranks()
        hosts = len(self.hosts)
        if nranks:
            parts.append(f"{nranks} rank{_s(nranks)}, logged on {hosts} host{_s(hosts)}")
        groups = {c.comm_id or f"{c.host}:{c.pid}" for c in self.communicators}
        if len(groups) > 1 and all(c.comm_id for c in self.communicators):
            parts.append(f"{len(groups)} communicators")
        for kind in self.transports:
            pairs = sorted({tuple(sorted((link.src, link.dst))) for link in self.links if link.kind == kind})
            shown = ", ".join(f"{a}-{b}" for a, b in pairs[:6]) + (", ..." if len(pairs) > 6 else "")
            parts.append(f"{kind} between {shown}")
        if self.ring_channels:
            parts.append(f"{self.ring_channels} channel{'s' if self.ring_channels != 1 else ''}")
        if self.versions:
            parts.append("NCCL " + self.versions[0].split("+")[0])
        if self.communicators:
            parts.append(f"Init COMPLETE x{self.init_complete}")
        if self.errors:
            parts.append(f"then: {self.errors[0]}")
        elif notable := [w for w in self.warnings if not w.benign]:
            parts.append(f"then WARN: {notable[0].message}")
        return "; ".join(parts) if parts else "no NCCL lines found (was NCCL_DEBUG=INFO set?)"

    def to_json(self) -> dict:
        document = asdict(self)
        document.update(
            transports=self.transports,
            init_complete=self.init_complete,
            ranks=self.ranks(),
            summary=self.summary(),
        )
        return document


def _s(n: int) -> str:
    return "" if n == 1 else "s"


def read_nccl_log(lines: Iterable[str]) -> NcclReading:
    reading = NcclReading()
    links: dict[tuple, Link] = {}
    comms: dict[tuple, Communicator] = {}
    warnings: dict[tuple, Warning_] = {}
    chain_codes: list[tuple[int, str]] = []
    pids: dict[str, set[int]] = {}  # host -> the processes that wrote NCCL lines
    for raw in lines:
        reading.lines += 1
        # NCCL's lines are short (its longest, the list of network interfaces, is a few hundred
        # characters); a longer one is something else, and is not searched past this.
        line = raw[:MAX_LINE].rstrip("\n")
        if match := _VERSION.search(line):
            if match["v"] not in reading.versions and len(reading.versions) < MAX_KEPT:
                reading.versions.append(match["v"])
        nccl = _LINE.search(line)
        if nccl is None:
            if (error := _ERROR.search(line)) and len(reading.errors) < MAX_KEPT:
                reading.errors.append(error.group(0).strip()[:300])
            continue
        reading.nccl_lines += 1
        host, pid, msg = nccl["host"], int(nccl["pid"]), nccl["msg"].strip()
        if host not in pids and len(pids) >= MAX_MANY:
            continue  # more hosts than any job has: the rest is not read
        pids.setdefault(host, set()).add(pid)
        if nccl["level"] == "WARN":
            key = (host, msg)
            if key in warnings:
                warnings[key].count += 1
            elif len(warnings) < MAX_KEPT:
                meaning = next((m for pattern, m in MEANINGS if re.search(pattern, msg)), None)
                benign = any(re.search(pattern, msg) for pattern in BENIGN)
                warnings[key] = Warning_(host, nccl["src"], msg[:300], meaning=meaning, benign=benign)
            continue
        _read_info(reading, host, pid, msg, links, comms, chain_codes)
    reading.links = sorted(links.values(), key=lambda k: (k.host, k.src, k.dst, k.kind))
    reading.communicators = list(comms.values())
    ranks: dict[str, set[int]] = {}
    for c in reading.communicators:
        ranks.setdefault(c.host, set()).add(c.rank)
    reading.hosts = {
        host: {"pids": sorted(found), "ranks": sorted(ranks.get(host, ()))} for host, found in pids.items()
    }
    for link in reading.links:
        link.channels.sort()
    reading.warnings = list(warnings.values())
    if chain_codes:  # NCCL's error chain: where it began, and the code it returned all the way up
        code, where = chain_codes[0]
        reading.errors.append(f"NCCL returned {code} ({RESULTS.get(code, 'unknown')}) from {where}")
    return reading


def _read_info(
    reading: NcclReading,
    host: str,
    pid: int,
    msg: str,
    links: dict,
    comms: dict,
    chain_codes: list[tuple[int, str]],
) -> None:
    if len(comms) >= MAX_MANY or len(links) >= MAX_MANY:
        return  # more communicators or links than a job has: the rest is not read
    if match := _INIT.search(msg):
        key = (host, pid, match["comm"])
        comm = comms.get(key) or Communicator(
            host, pid, match["comm"], match["id"], int(match["rank"]), int(match["nranks"])
        )
        comm.cuda_dev, comm.bus_id = int(match["dev"]), match["bus"]
        comm.comm_id = comm.comm_id or match["id"]
        comm.complete = comm.complete or match["state"] == "COMPLETE"
        comms[key] = comm
    elif match := _SHAPE.search(msg):
        key = (host, pid, match["comm"])
        comm = comms.setdefault(
            key, Communicator(host, pid, match["comm"], None, int(match["rank"]), int(match["nranks"]))
        )
        comm.nnodes, comm.local_ranks = int(match["nnodes"]), int(match["local"])
    elif match := _RING.match(msg):
        reading.ring_channels = max(reading.ring_channels or 0, int(match["of"]))
        if len(reading.rings) < MAX_MANY:
            reading.rings.setdefault(f"{host}:{pid}", [int(r) for r in match["order"].split()[:MAX_MANY]])
    elif match := _CONNECT.match(msg):
        via = match["via"]
        link_key = (host, int(match["src"]), int(match["dst"]), via)
        link = links.setdefault(
            link_key, Link(host, int(match["src"]), int(match["dst"]), transport_kind(via), via, match["dir"])
        )
        channel = int(match["ch"])
        if channel not in link.channels and len(link.channels) < MAX_CHANNELS:
            link.channels.append(channel)  # sorted once, at the end
    elif match := _CHANNELS.search(msg):
        reading.channel_counts = {k: int(v) for k, v in match.groupdict().items() if v is not None}
    elif (match := _ENV.match(msg)) and (match["name"] in reading.env or len(reading.env) < MAX_KEPT):
        reading.env[match["name"]] = match["value"].strip()
    elif match := _NETWORK.match(msg):
        if match["net"] not in reading.networks and len(reading.networks) < MAX_KEPT:
            reading.networks.append(match["net"])
    elif (match := _CHAIN.match(msg)) and not chain_codes:  # where the chain began is all that is said
        chain_codes.append((int(match["code"]), match["where"]))


def disagreements(reading: NcclReading, topology) -> list[str]:
    """Where NCCL's choice disagrees with the interconnect of ``topology`` (a Topology, as
    `nvidia-smi topo -m` shows it): a pair that shares NVLink, or a PCIe switch, but talked through
    shared memory or the network. Ranks map to GPUs by the cudaDev of their Init lines, so this
    holds for the host whose topology it is (with CUDA_VISIBLE_DEVICES unset)."""
    devices = {(c.host, c.rank): c.cuda_dev for c in reading.communicators if c.cuda_dev is not None}
    n = len(topology.gpus)
    found = []
    for link in reading.links:
        a, b = devices.get((link.host, link.src)), devices.get((link.host, link.dst))
        if a is None or b is None or a == b or not (a < n and b < n) or link.direction is not None:
            continue
        label = topology.matrix[a][b]
        if label.startswith("NV") and not link.kind.startswith("P2P"):
            why = (
                "P2P is off: is NCCL_P2P_DISABLE set, or NCCL_P2P_LEVEL below NVL? (in a container, "
                "the GPUs may also be isolated from each other)"
            )
        elif label in ("PIX", "PXB") and link.kind == "SHM":
            why = (
                "P2P over the PCIe switch is off: consumer GPUs do not allow it, or NCCL_P2P_DISABLE / "
                "NCCL_P2P_LEVEL forbid it"
            )
        else:
            continue
        low, high = sorted((a, b))
        sentence = f"GPU{low}-GPU{high} share {label} but NCCL used {link.kind}: {why}"
        if sentence not in found:
            found.append(sentence)
    return found
