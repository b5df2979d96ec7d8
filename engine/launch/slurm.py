"""Slurm's own words: the job a run belongs to, read from the environment Slurm gives each task.

Inside a step (``srun``), every task has ``SLURM_JOB_ID``, ``SLURM_STEP_ID``, the node list and
this task's place in it. :func:`slurm_job` reads them into a :class:`SlurmJob` (or None outside
Slurm); :func:`node_options` turns it into the torchrun options that `mgpu-tui run` would
otherwise need spelled out on every node (``--nnodes``, ``--node-rank``, ``--rdzv-endpoint``,
``--rdzv-id``, ``--nproc``). Pure: the one address this needs from Slurm (the first node's, as
Slurm reaches it) is asked by the caller (machine/slurm.py) and passed in.

Names never collide: a job's steps, and a requeued job's restarts, are each a run of their own,
with their own rendezvous id (the run folder's name) and port.
"""

from __future__ import annotations

import dataclasses
import re
import zlib
from collections.abc import Mapping
from dataclasses import dataclass

MAX_HOSTS = 65_536  # a node list that expands to more is refused, not expanded
PORTS = (20_000, 30_000)  # derived rendezvous ports: below Linux's ephemeral range (32768-)


class SlurmEnvironmentError(ValueError):
    """Slurm's variables are there but do not read as Slurm writes them; the message names which."""


@dataclass(frozen=True)
class SlurmJob:
    """The Slurm job, step and task that this process is (the summary's ``slurm``)."""

    job_id: str
    step_id: int | None  # None: the batch script itself, outside any srun step
    restart_count: int  # a requeued job's restarts (SLURM_RESTART_COUNT)
    nodelist: str  # as Slurm writes it: bn-host[1-2]
    nnodes: int
    node_id: int  # this node's index in the step's node list
    ntasks: int
    tasks_per_node: int  # on this node
    procid: int  # this task's global index
    localid: int  # this task's index on its node
    partition: str | None = None
    cluster: str | None = None
    gpus_on_node: int | None = None  # SLURM_GPUS_ON_NODE, where the job asked for GPUs

    @property
    def hosts(self) -> tuple[str, ...]:
        return expand_hostlist(self.nodelist)

    @property
    def run_id(self) -> str:
        """The rendezvous id and the run folder's name: job, step and restart."""
        step = "batch" if self.step_id is None else str(self.step_id)
        again = f"-r{self.restart_count}" if self.restart_count else ""
        return f"slurm-{self.job_id}-{step}{again}"

    @property
    def port(self) -> int:
        """A rendezvous port that this job's step and restart alone derive (the same on every node)."""
        low, high = PORTS
        return low + zlib.crc32(self.run_id.encode()) % (high - low)

    @property
    def one_task_per_node(self) -> bool:
        return self.ntasks == self.nnodes

    def describe(self, stopped_by: str | None = None) -> str:
        """The job in words; ``stopped_by`` (the summary's): how Slurm ended it."""
        end = {"cancelled": ": cancelled (scancel)", "time limit": ": stopped at its time limit"}
        return self._where() + end.get(stopped_by or "", "")

    def _where(self) -> str:
        step = "the batch script" if self.step_id is None else f"step {self.step_id}"
        restart = f", restart {self.restart_count}" if self.restart_count else ""
        where = f" in partition {self.partition}" if self.partition else ""
        return f"Slurm job {self.job_id}, {step}{restart}, on {self.nodelist}{where}"


def expand_hostlist(expression: str) -> tuple[str, ...]:
    """Slurm's compressed host list as host names: ``gpu[01-03,07],login`` is gpu01, gpu02, gpu03,
    gpu07, login; brackets may repeat (``r[1-2]n[1-2]``), and a range keeps its zero padding."""
    hosts: list[str] = []
    for item in _top_level_items(expression):
        names = [""]
        for literal, group in re.findall(r"([^\[\]]*)(?:\[([^\[\]]*)\])?", item):
            names = [name + literal for name in names]
            if group:
                names = [name + value for name in names for value in _range_values(group, expression)]
            if len(names) + len(hosts) > MAX_HOSTS:
                raise SlurmEnvironmentError(f"the node list {expression!r} names more than {MAX_HOSTS} hosts")
        hosts.extend(names)
    if not hosts or any(not host for host in hosts):
        raise SlurmEnvironmentError(f"the node list {expression!r} is not a Slurm host list")
    return tuple(hosts)


def _top_level_items(expression: str) -> list[str]:
    items, depth, start = [], 0, 0
    for i, char in enumerate(expression):
        depth += {"[": 1, "]": -1}.get(char, 0)
        if depth not in (0, 1):
            raise SlurmEnvironmentError(f"the node list {expression!r} is not a Slurm host list")
        if char == "," and depth == 0:
            items.append(expression[start:i])
            start = i + 1
    if depth:
        raise SlurmEnvironmentError(f"the node list {expression!r} is not a Slurm host list")
    items.append(expression[start:])
    return [item.strip() for item in items if item.strip()]


def _range_values(group: str, expression: str) -> list[str]:
    values: list[str] = []
    for part in group.split(","):
        match = re.fullmatch(r"(\d+)(?:-(\d+))?", part.strip())
        if not match:
            raise SlurmEnvironmentError(f"the node list {expression!r} is not a Slurm host list")
        low, high = match.group(1), match.group(2) or match.group(1)
        if int(high) < int(low) or int(high) - int(low) >= MAX_HOSTS:
            raise SlurmEnvironmentError(f"the node list {expression!r} has a range that is not one")
        values.extend(str(n).zfill(len(low)) for n in range(int(low), int(high) + 1))
    return values


def expand_counts(expression: str) -> tuple[int, ...]:
    """Slurm's per-node counts (``SLURM_STEP_TASKS_PER_NODE``): ``2(x3),1`` is 2, 2, 2, 1."""
    counts: list[int] = []
    for part in expression.split(","):
        match = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part.strip())
        if not match or int(match.group(2) or 1) > MAX_HOSTS - len(counts):
            raise SlurmEnvironmentError(f"the task counts {expression!r} are not Slurm's")
        counts.extend([int(match.group(1))] * int(match.group(2) or 1))
    return tuple(counts)


def _number(environ: Mapping[str, str], name: str, default: int | None = None) -> int:
    value = environ.get(name)
    if value is None or value == "":
        if default is None:
            raise SlurmEnvironmentError(f"{name} is not set, though SLURM_JOB_ID is")
        return default
    if not value.strip().isdigit():
        raise SlurmEnvironmentError(f"{name}={value[:40]!r} is not a number")
    return int(value)


def _gpus(value: str | None) -> int | None:
    """SLURM_GPUS_ON_NODE: a count; anything else (unset, a type:count) is not a count here."""
    return int(value) if value and value.strip().isdigit() else None


def slurm_job(environ: Mapping[str, str]) -> SlurmJob | None:
    """The Slurm job this process belongs to, or None outside Slurm. SlurmEnvironmentError where
    Slurm's variables contradict each other (a node id beyond the node list, say)."""
    job_id = environ.get("SLURM_JOB_ID") or environ.get("SLURM_JOBID")
    if not job_id:
        return None
    if not re.fullmatch(r"\d{1,20}", job_id):
        raise SlurmEnvironmentError(f"SLURM_JOB_ID={job_id[:40]!r} is not a job id")
    in_step = bool(environ.get("SLURM_STEP_ID") or environ.get("SLURM_STEPID"))
    step = "SLURM_STEP" if in_step else "SLURM_JOB"
    nodelist = environ.get(f"{step}_NODELIST") or environ.get("SLURM_JOB_NODELIST") or ""
    hosts = expand_hostlist(nodelist)
    nnodes = _number(environ, f"{step}_NUM_NODES", len(hosts))
    if nnodes != len(hosts):
        raise SlurmEnvironmentError(
            f"{step}_NUM_NODES={nnodes} but the node list {nodelist!r} has {len(hosts)}"
        )
    node_id = _number(environ, "SLURM_NODEID", 0)
    if node_id >= nnodes:
        raise SlurmEnvironmentError(f"SLURM_NODEID={node_id} is beyond the {nnodes} node(s) of {nodelist!r}")
    ntasks = _number(environ, "SLURM_STEP_NUM_TASKS" if in_step else "SLURM_NTASKS", nnodes)
    per_node = environ.get("SLURM_STEP_TASKS_PER_NODE" if in_step else "SLURM_TASKS_PER_NODE")
    counts = expand_counts(per_node) if per_node else (max(1, ntasks // nnodes),) * nnodes
    if len(counts) != nnodes:
        raise SlurmEnvironmentError(f"the task counts {per_node!r} are not one per node of {nodelist!r}")
    return SlurmJob(
        job_id=job_id,
        step_id=_number(environ, "SLURM_STEP_ID" if "SLURM_STEP_ID" in environ else "SLURM_STEPID")
        if in_step
        else None,
        restart_count=_number(environ, "SLURM_RESTART_COUNT", 0),
        nodelist=nodelist,
        nnodes=nnodes,
        node_id=node_id,
        ntasks=ntasks,
        tasks_per_node=counts[node_id],
        procid=_number(environ, "SLURM_PROCID", 0),
        localid=_number(environ, "SLURM_LOCALID", 0),
        partition=environ.get("SLURM_JOB_PARTITION") or None,
        cluster=environ.get("SLURM_CLUSTER_NAME") or None,
        gpus_on_node=_gpus(environ.get("SLURM_GPUS_ON_NODE")),
    )


@dataclass(frozen=True)
class NodeOptions:
    """What a step's environment decides of `mgpu-tui run`'s node options (None: not decided)."""

    nnodes: int
    node_rank: int
    rdzv_endpoint: str | None
    rdzv_id: str
    nproc: int | None

    def said(self, job: SlurmJob, given: frozenset[str]) -> str:
        """The one line that says what came from Slurm (``given``: the options the user gave, by
        field name, which win)."""
        per_task = "" if job.one_task_per_node else f" (one rank a task, {job.tasks_per_node} tasks a node)"
        taken = [
            f"--{f.name.replace('_', '-')} {value}"
            for f in dataclasses.fields(self)
            if (value := getattr(self, f.name)) is not None and f.name not in given
        ]
        what = " ".join(taken) if taken else "nothing (every node option was given)"
        return f"{job.describe()}: from Slurm {what}{per_task}"


def node_options(job: SlurmJob, head_address: str | None) -> NodeOptions:
    """The node options of a step: the first node (at ``head_address``, how Slurm reaches it; its
    name where that is not known) as the rendezvous endpoint on the port the job derives.

    One task a node: the step's nodes, this node's index, and the node's GPUs as its ranks where
    the job asked for GPUs (else None: run's own default, one rank a visible GPU). Several tasks a
    node (srun --ntasks-per-node=8, one task a rank): every task is a node of one rank to
    mgpu-tui, the task's global index its node rank, so its rank is SLURM_PROCID; the tasks of a
    host share its rendezvous store as nodes on one machine do (nodes/watch.py)."""
    per_task = not job.one_task_per_node
    host = head_address or job.hosts[0]
    endpoint = f"[{host}]:{job.port}" if ":" in host else f"{host}:{job.port}"
    return NodeOptions(
        nnodes=job.ntasks if per_task else job.nnodes,
        node_rank=job.procid if per_task else job.node_id,
        rdzv_endpoint=endpoint if (job.ntasks if per_task else job.nnodes) > 1 else None,
        rdzv_id=job.run_id,
        nproc=1 if per_task else job.gpus_on_node,
    )


def task_device(job: SlurmJob, visible: str | None) -> str | None:
    """With several tasks a node, the one GPU this task's rank uses (``CUDA_VISIBLE_DEVICES`` for
    it): the node's SLURM_LOCALID-th visible device, as ``srun --gpus-per-task=1`` would bind it;
    None where Slurm bound one already (or there is one task a node)."""
    if job.one_task_per_node:
        return None
    devices = [d.strip() for d in visible.split(",") if d.strip()] if visible is not None else None
    if devices is not None and len(devices) <= 1:
        return None  # Slurm (or the user) gave this task its device
    return devices[job.localid % len(devices)] if devices else str(job.localid)
