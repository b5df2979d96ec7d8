"""A run's summary as the console prints it at the end of `run`, `torchrun` and `exec`: the head
line (mode, status, world size, device, steps), a table of the ranks, the step time, and the notes
(where a step goes and why it is slow, the cause, memory, the machine, stragglers, nodes, Slurm,
a script's batch, a command's other processes). Every text passes the one sink (console.plain): a
rank's words are text only."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol, TypeVar

from mgpu_tui.console import (
    fmt_bytes,
    fmt_loss,
    fmt_rank_loss,
    fmt_rate,
    fmt_seconds,
    plain,
    status_word,
    table,
)
from mgpu_tui.engine.run.summary import RankSummary, RunSummary
from mgpu_tui.reports.anatomy import anatomy_lines, compute_line, verdict_lines
from mgpu_tui.reports.memory import memory_lines, memory_parts_lines


def machine_lines(summary: RunSummary) -> list[str]:
    """What the machine did during the run, from its telemetry: the host, each GPU, each rank."""
    t = summary.telemetry
    if t is None or not t.samples:
        return []
    cpu = (
        f"CPU {_pct(t.host_mean_cpu_percent)} (mean of {t.samples} samples)"
        if t.host_mean_cpu_percent is not None
        else "CPU n/a (the run was too short: a CPU share needs two samples a moment apart)"
    )
    lines = [f"host: {cpu}, memory {fmt_bytes(t.host_peak_mem_bytes)} (peak)"]
    for i, g in enumerate(t.gpus):
        energy = "n/a" if g.energy_j is None else f"{g.energy_j / 1000:.2f} kJ"
        lines.append(
            f"GPU {i} {g.name}: memory {fmt_bytes(g.peak_mem_bytes)} (peak), use "
            f"{_pct(g.mean_util_percent)}, power {_watts(g.mean_power_w)} (peak "
            f"{_watts(g.peak_power_w)}), energy {energy}"
        )
    if t.ranks:
        each = [
            f"rank {r.rank} CPU {_pct(r.mean_cpu_percent)} RSS {fmt_bytes(r.peak_rss_bytes)}" for r in t.ranks
        ]
        lines.append("processes: " + "  ".join(each))
    return lines


def other_processes_line(summary: RunSummary) -> str | None:
    """A command's processes that were no rank nor trainer (its launcher, the ranks' data-loader and
    compile workers), each group under whom it ran, with the CPU it used and its largest memory."""
    trainers = {t.pid for t in summary.trainers}  # listed as trainers, with their own figures
    others = [p for p in summary.processes if p.rank is None and p.pid not in trainers]
    if not others:
        return None
    groups: dict[int | None, list] = {}
    for p in others:
        groups.setdefault(p.of_rank, []).append(p)
    parts = []
    for owner, procs in sorted(groups.items(), key=lambda g: -1 if g[0] is None else g[0]):
        whose = "the launcher's" if owner is None else f"rank {owner}'s"
        cpu = sum(p.cpu_s or 0.0 for p in procs)
        peak = max((p.rss_peak_bytes or 0 for p in procs), default=0)
        parts.append(f"{whose} {len(procs)} ({cpu:.1f} CPU s, largest {fmt_bytes(peak)})")
    return "processes that were no rank: " + ", ".join(parts)


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.0f}%"


def _watts(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.0f} W"


EACH_RANK_AT_MOST = 16  # ranks the summary's table lists one by one; past that, a row a node


def _by_node(summary: RunSummary) -> list[tuple[str, list[RankSummary]]]:
    """The ranks in groups of one node each (the job's ranks split evenly over its nodes), or one
    group of them all when the nodes are not known."""
    ranks = sorted(summary.ranks, key=lambda r: r.rank)
    nodes = summary.nnodes or 1
    world = summary.world_size or len(ranks)
    if nodes < 2 or world % nodes:
        return [(f"ranks {ranks[0].rank}-{ranks[-1].rank}", ranks)]
    per_node = world // nodes
    groups: dict[int, list[RankSummary]] = {}
    for r in ranks:
        groups.setdefault(r.rank // per_node, []).append(r)
    return [
        (f"node {n} (ranks {n * per_node}-{(n + 1) * per_node - 1})", group)
        for n, group in sorted(groups.items())
    ]


def _group_row(name: str, group: list[RankSummary], tokens: bool) -> list[str]:
    """A node's row: its ranks' step range, summed rates, mean loss and largest peak memory."""
    steps = [r.last_step for r in group]
    rates = [r.samples_per_s for r in group if r.samples_per_s is not None]
    token_rates = [r.tokens_per_s for r in group if r.tokens_per_s is not None]
    losses = [r.loss for r in group if r.loss is not None]
    peaks = [r.peak_mem_bytes for r in group if r.peak_mem_bytes is not None]
    return [
        name,
        f"{min(steps)}-{max(steps)}" if min(steps) != max(steps) else str(steps[0]),
        fmt_rate(sum(rates) if rates else None),
        *([fmt_rate(sum(token_rates) if token_rates else None)] if tokens else []),
        fmt_loss(sum(losses) / len(losses) if losses else None),
        fmt_bytes(max(peaks) if peaks else None),
    ]


class Rated(Protocol):
    """A rank's figures as a summary or the live figures have them."""

    @property
    def rank(self) -> int: ...

    @property
    def samples_per_s(self) -> float | None: ...


RatedRank = TypeVar("RatedRank", bound=Rated)


def slowest_and_fastest(ranks: Iterable[RatedRank]) -> tuple[RatedRank, RatedRank] | None:
    """The slowest and the fastest of the ranks with a rate (the lower rank on a tie); None for
    fewer than two: the outliers a large job's console names."""
    rated = [r for r in ranks if r.samples_per_s is not None]
    if len(rated) < 2:
        return None
    slow = min(rated, key=lambda r: (r.samples_per_s, r.rank))
    fast = max(rated, key=lambda r: (r.samples_per_s, -r.rank))
    return slow, fast


def _outlier_line(summary: RunSummary) -> str:
    """The ranks to look at in a large job: the slowest and the fastest, and the one furthest behind."""
    said = [f"{len(summary.ranks)} ranks (every one in summary.json)"]
    if outliers := slowest_and_fastest(summary.ranks):
        slow, fast = outliers
        said.append(f"slowest rank {slow.rank} {fmt_rate(slow.samples_per_s)} samples/s")
        said.append(f"fastest rank {fast.rank} {fmt_rate(fast.samples_per_s)} samples/s")
    behind = min(summary.ranks, key=lambda r: (r.last_step, r.rank))
    if behind.last_step < max(r.last_step for r in summary.ranks):
        said.append(f"furthest behind rank {behind.rank} at step {behind.last_step}")
    return "; ".join(said)


def _figures_table(summary: RunSummary) -> str:
    """A row a rank (a large job: a row a node), then the job's: steps, rates, loss, peak memory."""
    tokens = any(r.tokens_per_s for r in summary.ranks)
    if len(summary.ranks) > EACH_RANK_AT_MOST:  # a large job: a row a node, the outliers named below
        rows = [_group_row(name, group, tokens) for name, group in _by_node(summary)]
    else:
        rows = [
            [
                f"rank {r.rank}",
                str(r.last_step),
                fmt_rate(r.samples_per_s),
                *([fmt_rate(r.tokens_per_s)] if tokens else []),
                fmt_rank_loss(r.loss, r.diverged_at),
                fmt_bytes(r.peak_mem_bytes),
            ]
            for r in summary.ranks
        ]
    rows.append(
        [
            "all",
            str(summary.steps),
            fmt_rate(summary.samples_per_s),
            *([fmt_rate(summary.tokens_per_s)] if tokens else []),
            fmt_loss(summary.final_loss) if not _diverged(summary) else "NaN",
            "",
        ]
    )
    headers = ["", "steps", "samples/s", *(["tokens/s"] if tokens else []), "loss", "peak mem"]
    body = table(headers, rows, right=tuple(range(1, len(headers))))
    return body


def trainers_table(summary: RunSummary) -> str:
    """A command's processes that trained with no process group, a row each: its steps, rate, loss,
    peak memory and how it ended."""
    tokens = any(t.tokens_per_s for t in summary.trainers)
    rows = [
        [
            f"trainer {t.trainer}",
            f"{t.pid or 'n/a'}{f' {t.process}' if t.process else ''}",
            *([str(t.phase)] if summary.phases else []),
            str(t.last_step),
            fmt_rate(t.samples_per_s),
            *([fmt_rate(t.tokens_per_s)] if tokens else []),
            fmt_loss(t.loss),
            fmt_bytes(t.peak_mem_bytes),
            "done" if t.done else f"failed: {t.error}" if t.error else "no end told",
        ]
        for t in summary.trainers
    ]
    headers = ["", "process", *(["phase"] if summary.phases else []), "steps", "samples/s"]
    headers += [*(["tokens/s"] if tokens else []), "loss", "peak mem", "end"]
    return table(headers, rows, right=tuple(range(2, len(headers) - 1)))


def phases_line(summary: RunSummary) -> str | None:
    """A command's phases one after another (a learning-rate finder, then the job)."""
    if not summary.phases:
        return None
    start = min(p.began_at for p in summary.phases)
    said = []
    for p in summary.phases:
        who = f"ranks (world size {p.world_size})" if p.kind == "ranks" else ""
        if p.trainers:
            numbers = ", ".join(map(str, p.trainers))
            who += f"{' and ' if who else ''}trainer{'s' if len(p.trainers) > 1 else ''} {numbers}"
        said.append(f"{p.phase}. {who} {p.began_at - start:.1f}-{p.ended_at - start:.1f} s")
    return "phases: " + "; ".join(said)


def summary_text(summary: RunSummary) -> str:
    backend = summary.backend or "no process group"
    world = f"world size {summary.world_size}"
    if summary.world_size == 0 and summary.trainers:
        world = f"trainers {len(summary.trainers)} (no process group)"
    head = (
        f"mode {summary.mode}  status {status_word(summary.status)}  {world}  "
        f"device {summary.device} ({backend})  steps {summary.steps}"
    )
    if summary.world_size == 0:  # a command in which no process became a rank: what was seen instead
        cause = f"\ncause: {summary.root_cause.headline()}" if summary.root_cause else ""
        cause += hung_line(summary)
        others = other_processes_line(summary)
        notes = [*([f"note: {summary.note}"] if summary.note else []), *machine_lines(summary)]
        notes += [*([others] if others else []), f"run directory {summary.run_dir}"]
        if summary.trainers:
            notes[:0] = [trainers_table(summary), script_line(summary)]
        return plain("\n".join([head + cause, *notes]))
    body = _figures_table(summary)
    spread = summary.step_time_s_p10_p90
    timing = f"step time (median) {fmt_seconds(summary.step_time_s_median)}"
    if spread:
        timing += f"  p10-p90 {fmt_seconds(spread[0])} - {fmt_seconds(spread[1])}"
    timing += f"  launch to first step {fmt_seconds(summary.launch_to_first_step_s)}"
    others = other_processes_line(summary)
    notes = [
        *memory_lines(summary),
        *machine_lines(summary),
        *([others] if others else []),
        f"run directory {summary.run_dir}",
    ]
    if len(summary.ranks) > EACH_RANK_AT_MOST:
        notes.insert(0, _outlier_line(summary))
    if summary.program is not None:
        notes.insert(0, script_line(summary))
    if summary.note:
        notes.insert(0, f"note: {summary.note}")
    if summary.telemetry and summary.telemetry.busy:
        notes.insert(0, f"BUSY MACHINE: {summary.telemetry.busy}.")
    if summary.verify:
        notes.insert(0, f"verify {'ok' if summary.verify.ok else 'FAILED'}: {summary.verify.describe()}")
    uncounted = [r.rank for r in summary.ranks if r.last_step and r.samples_per_s is None]
    if uncounted and summary.samples_per_s is not None:  # n/a beside a job's rate: say why
        notes.append(
            f"samples/s n/a for rank(s) {', '.join(map(str, uncounted))}: they count no samples by design "
            "(a sample is counted once, where it enters the job; docs/run-view.md)"
        )
    if summary.malformed_events:
        notes.append(f"{summary.malformed_events} malformed event line(s) skipped")
    notes[:0] = [f"straggler: {s.describe()}" for s in summary.stragglers]
    if summary.nccl:
        notes.insert(0, f"NCCL: {summary.nccl.summary}")
    if summary.slurm:
        notes.insert(0, summary.slurm.describe(summary.stopped_by))
    if summary.nodes:
        each = [f"node {n.node} {n.host or '?'} ranks {n.ranks} {n.state}" for n in summary.nodes]
        notes.insert(0, "nodes: " + "; ".join(each))
    if summary.root_cause:  # the summary says why it failed, not only that it did
        head += f"\ncause: {node_prefix(summary, summary.root_cause.rank)}{summary.root_cause.headline()}"
    head += hung_line(summary)
    if summary.trainers:
        body += "\n" + trainers_table(summary)
    notes[:0] = list(filter(None, [phases_line(summary)]))
    compute = compute_line(summary.compute, sum(1 for r in summary.ranks if r.compute is not None))
    taken_apart = [
        *([compute] if compute else []),
        *anatomy_lines(summary.anatomy),
        *verdict_lines(summary.verdicts),
        *memory_parts_lines(summary),
    ]
    return plain("\n".join([head, body, timing, *taken_apart, *notes]))  # a path, a rank's words: text only


def node_prefix(summary: RunSummary, rank: int | None) -> str:
    """A job over several nodes: the node a rank is on, before what is said of it ("node 37 (ranks
    296-303): "); nothing for one node, or for no rank."""
    if rank is None or len(summary.nodes) < 2:
        return ""
    node = next((n for n in summary.nodes if n.first_rank <= rank <= n.last_rank), None)
    return "" if node is None else f"node {node.node} (ranks {node.ranks}): "


def _diverged(summary: RunSummary) -> bool:
    return summary.final_loss is None and any(r.diverged_at is not None for r in summary.ranks)


def hung_line(summary: RunSummary) -> str:
    """The stall the watch found, as summary.json has it, where the root cause does not say it (a
    run that went on, was interrupted or failed otherwise after it): the hang it was in."""
    stall, cause = summary.stall, summary.root_cause
    if stall is None or (cause is not None and cause.message.startswith("stall")):
        return ""
    return f"\nhung: {stall.headline()}"


def script_line(summary: RunSummary) -> str:
    """A script's batch as counted (or why it is not known) and whether its training finished."""
    if summary.batch_size is not None:
        batch = f"global batch {summary.batch_size} ({summary.batch_size_source})"
    else:
        batch = "global batch n/a (no batch entered a DistributedDataParallel or FSDP module)"
    if summary.steps == 0 and any(r.collectives for r in summary.ranks):
        counts = ", ".join(f"rank {r.rank} {r.collectives or 0:,}" for r in summary.ranks)
        batch = f"no optimizer step; collectives entered: {counts}"
    if summary.world_size == 0 and summary.trainers:
        batch = "no process group: each trainer's figures are its own"
    if summary.finished_training:
        every = "rank" if not summary.trainers else "trainer" if not summary.ranks else "rank and trainer"
        return f"{batch}; the script ran to its end on every {every}"
    return batch
