"""What the Run view says in text: its status line, each rank's state and its table, a node's
heading, the slow ranks' remark and a finished run's result panel. Pure functions of the run's
figures (the view draws them; tests read them)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from rich.text import Text

from mgpu_tui.console import fmt_bytes, fmt_loss, fmt_rate, fmt_seconds, plain
from mgpu_tui.engine.nodes.view import NodeView
from mgpu_tui.engine.protocol.events import STEP_PARTS
from mgpu_tui.engine.protocol.heartbeat import NodeState
from mgpu_tui.engine.run.figures.anatomy import RankAnatomy, Verdict
from mgpu_tui.engine.run.figures.mfu import Compute
from mgpu_tui.engine.run.figures.rank_state import RankState, rank_state  # noqa: F401 (the app's names for them)
from mgpu_tui.engine.run.figures.rank_stats import RankStats
from mgpu_tui.engine.run.summary import RunStatus
from mgpu_tui.reports.anatomy import fmt_tflops
from mgpu_tui.reports.memory import memory_lines

if TYPE_CHECKING:
    from mgpu_tui.engine.records.telemetry_read import NodeMachine
    from mgpu_tui.engine.run.causes.watchdog import Stall
    from mgpu_tui.engine.run.figures.aggregate import RunStats
    from mgpu_tui.engine.run.summary import RunSummary


STATE_STYLE = {
    RankState.STARTING: "dim",
    RankState.RUNNING: "green",
    RankState.DONE: "bold green",
    RankState.FAILED: "bold red",
    RankState.NO_PEER: "red",
    RankState.STALLED: "bold yellow",
    RankState.SILENT: "yellow",
    RankState.STOPPED: "yellow",
    RankState.SLOW: "bold magenta",
    RankState.LOST: "bold red",
    RankState.MISSING: "bold yellow",
}
# A rank of another node, by what its node last said (engine/nodes/watch.py's states).
NODE_RANK_STATE = {
    NodeState.JOINING: RankState.STARTING,
    NodeState.RUNNING: RankState.RUNNING,
    NodeState.OK: RankState.DONE,
    NodeState.FAILED: RankState.FAILED,
    NodeState.INTERRUPTED: RankState.STOPPED,
    NodeState.LOST: RankState.LOST,
    NodeState.MISSING: RankState.MISSING,
}
RANK_COLUMNS = (("rank", 7), ("state", 8), ("step", 7), ("samples/s", 10), ("loss", 8), ("peak memory", 11))

# Where a rank's step goes (engine/run/figures/anatomy.py), as a bar of BAR cells after its row: each part
# its colour, the same everywhere; the legend under the table.
BAR = 16
BAR_HEADER = "step's parts"
PART_STYLE = {
    "data": "yellow",
    "forward": "green",
    "backward": "blue",
    "comm": "red",
    "optimizer": "magenta",
    "host": "bright_black",
}


def step_bar(rank: RankAnatomy, width: int = BAR) -> Text:
    """The rank's step as ``width`` cells, each part's count its share (the largest remainders
    rounded up, so the cells always fill the bar)."""
    shares = [max(0.0, rank.share(part)) for part in STEP_PARTS]
    total = sum(shares) or 1.0
    exact = [share / total * width for share in shares]
    cells = [int(x) for x in exact]
    for i in sorted(range(len(exact)), key=lambda i: exact[i] - cells[i], reverse=True)[: width - sum(cells)]:
        cells[i] += 1
    return Text.assemble(*(("█" * n, PART_STYLE[part]) for part, n in zip(STEP_PARTS, cells) if n))


def parts_legend() -> Text:
    return Text.assemble(*((f"█ {part}  ", PART_STYLE[part]) for part in STEP_PARTS))


# What o sorts the rank table by, in turn: each column, the row to look at first on top (the
# slowest, the furthest behind, the highest loss, the most memory).
SORTS = ("rank", "samples/s", "step", "loss", "peak memory")


def sort_key(column: str, rank: int, stats: RankStats | None) -> tuple:
    """A rank's place when the table is sorted by ``column``: unknown figures last, then by rank."""
    if column == "rank" or stats is None:
        return (column != "rank", rank)
    value = {
        "samples/s": stats.samples_per_s,
        "step": stats.last_step,
        "loss": None if stats.loss is None else -stats.loss,
        "peak memory": None if stats.mem_peak_bytes is None else -stats.mem_peak_bytes,
    }[column]
    return (value is None or value != value, value if value is not None and value == value else 0, rank)


def rank_table(
    rows: list[tuple[str, ...]], sorted_by: str = "rank", bars: Mapping[int, RankAnatomy] | None = None
) -> Text:
    """The per-rank rows under a bold header (the column they are sorted by underlined); text columns
    left, numbers right. A row of one cell heads a node's ranks (a job over several nodes). ``bars``:
    where each rank's step goes, by rank, drawn after its row (step_bar), the legend under them."""
    text = Text()
    for i, (name, width) in enumerate(RANK_COLUMNS):
        style = "bold underline" if name == sorted_by else "bold"
        text.append((name.ljust(width) if i < 2 else name.rjust(width)) + " ", style=style)
    if bars:
        text.append(BAR_HEADER, style="bold")
    for cells in rows:
        text.append("\n")
        if len(cells) == 1:
            text.append(cells[0], style="bold cyan")
            continue
        text.append_text(rank_line(cells))
        number = cells[0].removeprefix("rank ")
        if bars and number.isdigit() and int(number) in bars:
            text.append_text(step_bar(bars[int(number)]))
    if bars:
        text.append("\n")
        text.append_text(parts_legend())
    return text


def rank_line(cells: tuple[str, ...]) -> Text:
    """One rank's row: its cells in the rank table's columns, its state in the state's colour."""
    text = Text()
    for i, (cell, (_, width)) in enumerate(zip(cells, RANK_COLUMNS)):
        style = STATE_STYLE[RankState(cell)] if i == 1 else ""
        text.append((cell.ljust(width) if i < 2 else cell.rjust(width)) + " ", style=style)
    return text


def node_heading(node: NodeView, machine: NodeMachine | None = None) -> str:
    """The row over a node's ranks: which node, on which host, how it is as heard from here, and
    (a job followed from its folder) its host's CPU, memory and GPUs as its telemetry last said."""
    heading = f"node {node.node} · {node.host or 'not heard from'} · ranks {node.ranks}"
    if machine is not None:
        cpu = "n/a" if machine.cpu_percent is None else f"{machine.cpu_percent:.0f}%"
        heading += f" · CPU {cpu} · mem {fmt_bytes(machine.mem_used_bytes)}"
        if machine.gpu_util_percent is not None:
            heading += f" · GPUs {machine.gpu_util_percent:.0f}%"
    if node.here:
        heading += " · this node"
    if node.state in (NodeState.LOST, NodeState.MISSING, NodeState.FAILED, NodeState.INTERRUPTED):
        heading += f" · {node.state}"
    if node.state is NodeState.LOST and node.silent_s is not None:
        heading += f" {node.silent_s:.0f} s"
    return plain(heading)  # another machine's words: text only


def of_steps(requested: int | None) -> str:
    """The total after a step count ("/300"), or nothing for a script, which says none."""
    return "" if requested is None else f"/{requested:,}"


def compute_text(compute: Compute | None, why: bool = True) -> str | None:
    """The job's TF/s and MFU in a few words (None: its steps' FLOPs are not counted); ``why``: an
    MFU that is n/a says why (the status line, short, leaves it out)."""
    if compute is None or compute.tflops is None:
        return None
    if compute.mfu is None:
        reason = f" (MFU n/a: {compute.note})" if why else ""
        return f"{fmt_tflops(compute.tflops)} TFLOP/s{reason}"
    hfu = f", HFU {compute.hfu * 100:.1f}%" if compute.hfu else ""  # recomputation counted, where any
    return f"{fmt_tflops(compute.tflops)} TFLOP/s, MFU {compute.mfu * 100:.1f}%{hfu}"


def result_panel(summary: RunSummary) -> Text:
    """A finished run's figures in two lines, and where its files are."""
    peaks = [p for p in summary.peak_mem_bytes if p is not None]
    # On the CPU the rank's resident set: the runtime besides its tensors (the memory line).
    peak = "process peak" if summary.device == "cpu" else "peak"
    figures = [
        f"{summary.steps:,}{of_steps(summary.steps_requested)} steps in {fmt_seconds(summary.duration_s)}",
        f"{fmt_rate(summary.samples_per_s)} samples/s",
        f"step {fmt_seconds(summary.step_time_s_median)}",
        f"loss {fmt_loss(summary.final_loss)}",
        f"{peak} {fmt_bytes(max(peaks)) if peaks else 'n/a'} a rank",
    ]
    compute = compute_text(summary.compute)
    if compute:
        figures.append(compute)
    memory = memory_lines(summary)  # the tensors' peak beside the plan's, where the run had a plan
    if summary.verify is not None:
        figures.append(f"verify {summary.verify.describe()}")
    energy = [g.energy_j for g in summary.telemetry.gpus] if summary.telemetry else []
    known = [e for e in energy if e is not None]
    if energy and len(known) == len(energy):
        figures.append(f"GPU energy {sum(known):,.0f} J")
    title = {RunStatus.OK: "Finished", RunStatus.INTERRUPTED: "Stopped", RunStatus.FAILED: "Failed"}[
        summary.status
    ]
    # The hang a stopped run was in comes first: a short terminal keeps the panel's first lines.
    hang = ""
    if summary.stall is not None:
        steps = {r.rank: r.last_step for r in summary.ranks}
        said = "Hung" if still_hung(summary.stall, steps) else "Stalled, then moved on"
        hang = f"{said}: {summary.stall.headline()}.\n"
    slow = "".join(f"\nStraggler: {s.describe()}." for s in summary.stragglers)
    slow += "".join(f"\n{verdict_sentence(v)}" for v in summary.verdicts)
    job = f"\n{summary.slurm.describe(summary.stopped_by)}." if summary.slurm else ""
    return Text.assemble(  # verify's error and a straggler's words come from the run's files
        (plain(hang), "bold yellow"),
        (f"{title}: ", "bold"),
        plain(" · ".join(figures)),
        (plain(slow), "magenta"),
        plain(job),
        *(part for line in memory for part in ("\n", plain(line[0].upper() + line[1:]))),
        "\n",
        ("Run directory: ", "bold"),
        plain(summary.run_dir),
    )


def running_status(heading: str, stats: RunStats, steps_requested: int | None) -> str:
    """The status line while a run goes: its heading and keys first (80 columns cut the rest),
    then its step, samples/s, loss and, where counted (a script's watch), its compute rate."""
    status = (
        f"{heading}   step {stats.steps:,}{of_steps(steps_requested)}   "
        f"{fmt_rate(stats.samples_per_s)} samples/s   loss {fmt_loss(stats.final_loss)}"
    )
    compute = compute_text(stats.compute, why=False)
    return f"{status}   {compute}" if compute else status


def waiting(seconds: float, nice: int, load: tuple[float, int]) -> str:
    """How long a run has been starting, and the causes this machine shows: its ranks' lower
    priority beside the app (``nice``), and the machine's ``load`` (1-minute average, cores)."""
    causes = []
    if nice:
        causes.append(f"its ranks run at nice {nice} so the screen stays quick")
    average, cores = load
    if average > cores:
        causes.append(f"the machine's load is {average:.1f} on {cores} cores")
    said = f"{seconds:.0f} s"
    return f"{said} ({'; '.join(causes)})" if causes else said


def slow_ranks_remark(stats: RunStats) -> str:
    """The stragglers and the verdicts of a run that goes. A straggler a verdict names already is
    said once, by the verdict (it says why, and what to try): the note's few lines on an 80x24
    screen hold it whole."""
    named = {rank for v in stats.verdicts if len(v.ranks) < len(stats.ranks) for rank in v.ranks}
    said = [f"Straggler: {s.describe()}." for s in stats.stragglers if s.rank not in named]
    said += [verdict_sentence(v) for v in stats.verdicts]
    return " ".join(said)


def verdict_sentence(verdict: Verdict) -> str:
    """A verdict as the view says it: its words, then the change to try where one applies."""
    said = f"{verdict.text[0].upper()}{verdict.text[1:]}."
    return f"{said} Try: {verdict.hint}." if verdict.hint else said


def still_hung(stall: Stall, steps: Mapping[int, int]) -> bool:
    """Whether every rank of the stall is still at its step then (``steps``: each rank's last step
    now): a stall whose ranks moved on (a long checkpoint, a slow start on a busy machine) is no
    hang now."""
    return all(steps.get(r.rank, r.last_step) <= r.last_step for r in stall.ranks)


def hang_note(stall: Stall) -> str:
    """A hang found while the run goes: its verdict (who never entered which collective, where the
    others wait, the file and line)."""
    return f"Hang: {stall.headline()}."


def cut_off_status(label: str, steps: int) -> str:
    """A followed run whose monitor died without a summary."""
    return plain(
        f"{label} cut off at step {steps:,}: nothing follows it and it has no summary "
        "(its monitor was killed, or the machine restarted)"
    )


def ended_status(summary: RunSummary) -> str:
    """The status line of a run that ended: how, its figures and its folder."""
    verdict = {RunStatus.OK: "finished ok", RunStatus.FAILED: "FAILED", RunStatus.INTERRUPTED: "interrupted"}[
        summary.status
    ]
    if summary.verify is not None:
        verdict += f", verify {'ok' if summary.verify.ok else 'FAILED'}"
    steps = {r.rank: r.last_step for r in summary.ranks}
    if summary.stall is not None and summary.root_cause is None and still_hung(summary.stall, steps):
        verdict += " after a hang"  # (the panel says which rank never entered what)
    return plain(
        f"{summary.mode} {verdict}: {summary.steps} steps, {fmt_rate(summary.samples_per_s)} "
        f"samples/s, loss {fmt_loss(summary.final_loss)}   {summary.run_dir}"
    )
