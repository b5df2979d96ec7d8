"""A real Slurm cluster on this machine: Debian's slurm-wlm and munge, on separate hosts.

The head host (``bn-host0``) runs slurmctld, and is the login node the tests submit from; every
other host runs one slurmd under its own hostname, so a job's nodes are separate machines as far
as Slurm, the rendezvous and mgpu-tui can tell (their network, hostname and hosts file:
separate_hosts.py). One munged serves them all through a socket in the cluster's folder. Killing
a compute host (its slurmd and everything on it) leaves the controller and the login node up.

Set up as a production cluster is where it matters to mgpu-tui: scancel's SIGCONT and SIGTERM to
every process of a step then SIGKILL after KillWait, the time limit's, a node that stops
answering, and a SlurmdTimeout longer than mgpu-tui's lost-host verdict (so mgpu-tui, not Slurm,
names a dead node first). Where Slurm cannot have its cgroups (the namespace hosts have none),
each slurmd gets the two hierarchies it looks for, mounted in its own mount namespace.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

from waiting import wait_until

from tests.integration.separate_hosts import Host, SeparateHosts, why_unavailable

KILL_WAIT_S = 10  # scancel: SIGTERM, then SIGKILL this long after (production default 30)
# Slurm marks a silent node DOWN after this; mgpu-tui names a lost host long before (nodes/watch.py).
SLURMD_TIMEOUT_S = 120
CGROUPS = (
    "mount -t tmpfs none /sys/fs/cgroup && mkdir /sys/fs/cgroup/freezer /sys/fs/cgroup/systemd"
    " && mount -t cgroup -o freezer none /sys/fs/cgroup/freezer"
    " && mount -t cgroup -o none,name=systemd none /sys/fs/cgroup/systemd"
    ' && exec "$@"'
)


def why_no_slurm() -> str | None:
    """Why a Slurm cluster cannot be made here, or None when it can."""
    if reason := why_unavailable():
        return reason
    for tool in ("slurmctld", "slurmd", "munged", "sbatch", "srun"):
        if shutil.which(tool) is None:
            return f"`{tool}` is not installed (Debian: apt-get install slurm-wlm munge)"
    if not Path("/etc/munge/munge.key").exists():
        return "munge has no key (/etc/munge/munge.key)"
    return None


class SlurmCluster(SeparateHosts):
    """``nodes`` compute hosts and a head host, with Slurm running on them; a context manager."""

    def __init__(self, folder: Path, nodes: int = 2) -> None:
        super().__init__(nodes + 1)
        self.folder = folder
        self.head: Host = self.hosts[0]
        self.nodes: list[Host] = self.hosts[1:]
        self.conf = folder / "slurm.conf"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}
        self._daemons: dict[str, subprocess.Popen] = {}

    def why_not(self) -> str | None:
        return why_no_slurm()

    def _make(self) -> None:
        super()._make()  # the hosts, then Slurm on them
        self._start()

    def _write_conf(self) -> None:
        d = self.folder
        for sub in ("state", "log", "munge", *(f"spool-{n.hostname}" for n in self.nodes)):
            (d / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(d / "munge", 0o755)
        nodes = "".join(
            f"NodeName={n.hostname} NodeAddr={n.address} CPUs=2 State=UNKNOWN\n" for n in self.nodes
        )
        self.conf.write_text(
            f"""ClusterName=mgputest
SlurmctldHost={self.head.hostname}({self.head.address})
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={d}/munge/socket
CredType=cred/munge
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool-%n
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd-%n.pid
SlurmctldLogFile={d}/log/slurmctld.log
SlurmdLogFile={d}/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
SlurmdTimeout={SLURMD_TIMEOUT_S}
KillWait={KILL_WAIT_S}
MinJobAge=600
MpiDefault=none
{nodes}PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE
"""
        )

    def _daemon(self, name: str, argv: list[str]) -> None:
        log = open(self.folder / "log" / f"{name}.out", "w")
        self._daemons[name] = subprocess.Popen(argv, env=self.env, stdout=log, stderr=subprocess.STDOUT)
        log.close()

    def _start(self) -> None:
        self._write_conf()
        d = self.folder / "munge"
        self._daemon(
            "munged",
            [
                "munged",
                "-F",
                "--force",
                "-S",
                f"{d}/socket",
                "--pid-file",
                f"{d}/pid",
                "--seed-file",
                f"{d}/seed",
            ],
        )
        for _ in range(50):
            if (d / "socket").exists():
                break
            time.sleep(0.1)
        self._daemon("slurmctld", self.head.argv("slurmctld", "-D", "-i"))
        for node in self.nodes:
            self.start_node(node)

        def idle() -> bool:
            states = self.on_head("sinfo", "-h", "-N", "-o", "%T", timeout=10).stdout.split()
            return len(states) == len(self.nodes) and all(s == "idle" for s in states)

        if wait_until(idle, 60, every=0.5):
            return
        raise RuntimeError(f"the Slurm nodes never became idle: {self.logs()}")

    def start_node(self, node: Host) -> None:
        self._daemon(
            f"slurmd-{node.hostname}",
            node.argv("sh", "-c", CGROUPS, "sh", "slurmd", "-D", "-N", node.hostname),
        )

    def on_head(self, *argv: str, timeout: float = 60, **kwargs) -> subprocess.CompletedProcess:
        """A command on the login node (the head host), with the cluster's configuration."""
        return subprocess.run(
            self.head.argv(*argv), env=self.env, capture_output=True, text=True, timeout=timeout, **kwargs
        )

    def submit(self, script: Path, *options: str) -> str:
        """``sbatch`` a script from the login node; the job's id."""
        done = self.on_head("sbatch", "--parsable", *options, str(script), cwd=str(script.parent))
        if done.returncode:
            raise RuntimeError(f"sbatch failed: {done.stderr.strip()}")
        return done.stdout.strip().split(";")[0]

    def state(self, job_id: str) -> str:
        out = self.on_head("scontrol", "show", "job", "-o", job_id, timeout=10).stdout
        for word in out.split():
            if word.startswith("JobState="):
                return word.split("=", 1)[1]
        return "UNKNOWN"

    def wait_state(self, job_id: str, states: tuple[str, ...], timeout: float) -> str:
        """The job's state once it is one of ``states`` (the one seen then), else its last."""
        seen: list[str] = []

        def reached() -> bool:
            seen.append(self.state(job_id))
            return seen[-1] in states

        wait_until(reached, timeout, every=0.5)
        return seen[-1]

    def kill_node(self, node: Host) -> None:
        """The node dies: its slurmd and every process on the host, at once."""
        daemon = self._daemons.pop(f"slurmd-{node.hostname}")
        for pid in self.pids_in(node):
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
        daemon.wait(10)

    def pids_on(self, node: Host) -> list[int]:
        """The processes of a job still on a compute host: Slurm's own (slurmd, and the slurmstepd
        that waits to report a step to a dead node's peers) aside."""
        daemon = self._daemons.get(f"slurmd-{node.hostname}")
        keep = {daemon.pid} if daemon else set()
        pids = set(self.pids_in(node)) - keep
        return sorted(p for p in pids if _command(p) not in ("", "slurmd", "slurmstepd", "sh"))

    def logs(self) -> str:
        return "\n".join(
            f"== {p.name}\n{p.read_text(errors='replace')[-2000:]}"
            for p in sorted((self.folder / "log").glob("*"))
        )

    def close(self) -> None:
        for name in reversed(list(self._daemons)):
            proc = self._daemons.pop(name)
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        super().close()


def _command(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""
