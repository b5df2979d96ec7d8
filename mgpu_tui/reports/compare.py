"""How ``compare`` and ``scale`` report: a terminal table and charts, and .json, .md, .csv, .png files.

The best value of each column is marked (``*`` in text, bold in Markdown). Charts
in the terminal are bars and sparklines of plain characters; the PNG needs
matplotlib (the optional ``charts`` extra) and is skipped, with a sentence, without it.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import itertools
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from mgpu_tui.console import fmt_bytes, fmt_loss, fmt_rate, fmt_seconds, plain, table
from mgpu_tui.engine.compare import scaling
from mgpu_tui.engine.compare.comparison import Comparison, Row
from mgpu_tui.engine.protocol.folder import dumps as strict_json
from mgpu_tui.engine.run.summary import RunStatus

FORMATS = (".json", ".md", ".csv")


def _fmt_tflops(x: float | None) -> str:
    if x is None:
        return "n/a"
    return f"{x:.2f}" if x >= 0.1 else f"{x:.3f}"


def _state(r: Row) -> int | None:
    """The largest predicted state (parameters, gradients, optimizer) of a rank."""
    known = [m.predicted_state_bytes for m in r.memory if m.predicted_state_bytes is not None]
    return max(known) if known else None


def _fmt_state(r: Row) -> str:
    """The largest predicted state, and whether every rank measured what was predicted (=) or not."""
    predicted = _state(r)
    if predicted is None:
        return "n/a"
    verdicts = [m.state_as_planned for m in r.memory if m.state_as_planned is not None]
    verdict = "" if not verdicts else " =" if all(verdicts) else " ≠"
    return fmt_bytes(predicted) + verdict


def _fmt_pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


# Columns: (header, value, format, which is best: max, min, or None for no mark).
COLUMNS: list[tuple[str, Callable[[Row], Any], Callable | None, Callable | None]] = [
    ("samples/s", lambda r: r.samples_per_s, fmt_rate, max),
    ("per device", lambda r: r.samples_per_s_per_device, fmt_rate, max),
    ("tokens/s", lambda r: r.tokens_per_s, fmt_rate, max),
    ("step (median)", lambda r: r.step_time_s_median, fmt_seconds, min),
    ("TFLOP/s/dev", lambda r: r.tflops_per_device, _fmt_tflops, max),
    ("MFU", lambda r: r.mfu, _fmt_pct, max),
    ("peak mem", lambda r: r.peak_mem_bytes, fmt_bytes, min),
    ("state/rank", _state, None, None),
    ("final loss", lambda r: r.final_loss, fmt_loss, None),
]


DISAGREES = "†"  # after a samples/s its median step contradicts (the notes say why)


def disagreement(where: str, batch_size: int, rate: float | None, median: float | None) -> str | None:
    """A note for a row whose samples/s (``rate``) and median step contradict each other
    (scaling.py's rule): which figure holds and why they differ; None where they agree."""
    mean = scaling.step_of_rate(batch_size, rate)
    if mean is None or median is None or not scaling.figures_disagree(batch_size, rate, median):
        return None
    why = (
        "a few steps took far longer than most (a busy machine, a pause), and they count in its time "
        "but not in the median."
        if mean > median
        else "most steps took longer than the median one."
    )
    return (
        f"{DISAGREES} {where}: samples/s counts the steps' whole time, a mean step of "
        f"{fmt_seconds(mean)} at batch {batch_size:,}; the median step, {fmt_seconds(median)}, would "
        f"give {fmt_rate(batch_size / median)} samples/s. The samples/s holds for the run: {why}"
    )


def _best(rows: Sequence[Row]) -> dict[str, float]:
    best = {}
    for header, value, _, pick in COLUMNS:
        values = [value(r) for r in rows if r.status is RunStatus.OK and value(r) is not None]
        if pick and len(values) > 1:
            best[header] = pick(values)
    return best


Cell = TypeVar("Cell")


def cells(
    rows: Sequence[Row],
    mark: Callable[[str], Cell],
    other: Callable[[str], Cell],
) -> tuple[list[str], list[list[str | Cell]]]:
    """Headers and cells; ``mark`` dresses a column's best value, ``other`` the rest of that column
    (plain text here, Rich's Text in the app)."""
    best = _best(rows)
    first = "run" if any(r.label for r in rows) else "mode"  # rows named by their runs (compare --runs)
    headers = [first, "status", "ranks"] + [h for h, *_ in COLUMNS]
    out = []
    for r in rows:
        cells: list[str | Cell] = [r.name, r.status, str(r.world_size)]
        disagrees = scaling.figures_disagree(r.batch_size, r.samples_per_s, r.step_time_s_median)
        for header, value, fmt, _ in COLUMNS:
            v = value(r)
            if fmt is None:  # a column that formats the whole row
                cells.append(_fmt_state(r))
                continue
            text = fmt(v) + (DISAGREES if disagrees and header == "samples/s" else "")
            if header not in best:
                cells.append(text)
            else:
                cells.append(mark(text) if v == best[header] else other(text))
        out.append(cells)
    return headers, out


FOOTNOTE = (
    "* best in its column.  Per device: per GPU on CUDA, per rank on the CPU.  "
    "TFLOP/s from the model's training FLOPs (MLP: 3 x forward; GPT: 6N + 12 L d s a token).  "
    "state/rank: parameters, gradients and optimizer state the planner predicts for the fullest "
    "rank; = every rank measured exactly that."
)


def compare_table(comparison: Comparison) -> str:
    headers, rows = cells(comparison.rows, lambda text: text + "*", lambda text: text + " ")
    return "\n".join([table(headers, rows, right=tuple(range(2, len(headers)))), *compare_notes(comparison)])


def compare_notes(comparison: Comparison) -> list[str]:
    """What the table's marks mean, and what its figures cannot be trusted for (a failed run, a busy
    machine, modes run side by side): under the table, in the CLI and in the app alike."""
    lines = [FOOTNOTE]
    for r in comparison.rows:
        if r.root_cause:
            lines.append(plain(f"{r.name} failed: {r.root_cause}  (logs: {r.run_dir})"))  # a rank's words
        elif r.note:
            lines.append(f"{r.name}: {r.note}")
        if said := disagreement(r.name, r.batch_size, r.samples_per_s, r.step_time_s_median):
            lines.append(said)
        if r.busy:
            lines.append(f"BUSY MACHINE, {r.name}: {r.busy}.")
    if comparison.parallel:
        lines.append("Note: the modes ran at the same time and shared this host: not a fair race.")
    return lines


def fmt_speedup(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f}x"


def _fmt_lr(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.4g}"


def loss_header(comparison: Comparison) -> str:
    samples = scaling.common_samples(comparison.rows, comparison.scale.steps)
    return f"loss @ {samples:,} samples" if samples else "loss @ same samples"


# The scale table: (header, point key, format).
SCALE_COLUMNS: list[tuple[str, str, Callable]] = [
    ("ranks", "nproc", str),
    ("status", "status", str),
    ("global batch", "batch_size", str),
    ("lr", "lr", _fmt_lr),
    ("samples/s", "samples_per_s", fmt_rate),
    ("speedup", "speedup", fmt_speedup),
    ("efficiency", "efficiency", _fmt_pct),
    ("step (median)", "step_time_s_median", fmt_seconds),
    ("peak mem", "peak_mem_bytes", fmt_bytes),
    ("loss @", "loss_after_common_samples", fmt_loss),
    ("final loss", "final_loss", fmt_loss),
]
OVER_LINEAR = 1.05  # an efficiency past this is a timing artefact, not a speed-up (noise allowed)
SWEEP_NOTES = {
    "strong": "strong scaling: the global batch stays; each rank takes a smaller share.",
    "weak": "weak scaling: the batch per rank stays; the global batch grows with the ranks.",
    "batch": "a batch sweep at one rank count.",
}


def scale_cells(comparison: Comparison) -> tuple[list[str], list[list[str]]]:
    headers = [loss_header(comparison) if h == "loss @" else h for h, _, _ in SCALE_COLUMNS]

    def cell(p: scaling.ScalePoint, key: str, fmt: Callable) -> str:  # n/a where a figure is not known
        return fmt(getattr(p, key)) + (DISAGREES if key == "samples_per_s" and p.figures_disagree else "")

    return headers, [[cell(p, key, fmt) for _, key, fmt in SCALE_COLUMNS] for p in comparison.points()]


def scale_notes(comparison: Comparison) -> list[str]:
    settings = comparison.scale
    notes = [SWEEP_NOTES[settings.sweep]]
    if settings.sweep != "strong":
        warmup = settings.warmup_steps
        notes.append(
            f"lr follows the global batch by the {settings.lr_rule} rule, from {settings.lr:g} at "
            f"the first point's batch; "
            + (f"every point warms up over {warmup} steps." if warmup else "no warm-up.")
        )
    if settings.sweep != "batch":
        notes.append("efficiency = throughput(N) / (N x throughput(1)), against the smallest count that ran.")
        over = [p for p in comparison.points() if p.efficiency is not None and p.efficiency > OVER_LINEAR]
        for r in comparison.rows:
            if r.busy:
                notes.append(f"BUSY MACHINE at {r.world_size} rank(s), batch {r.batch_size}: {r.busy}.")
        if over:  # more than linear: the timings, not the ranks (a busy machine, a slow first point)
            counts = ", ".join(f"{p.nproc} ranks ({_fmt_pct(p.efficiency)})" for p in over)
            notes.append(
                f"NOT TRUSTWORTHY: efficiency over 100% at {counts}: more ranks cannot do more than "
                "their share; the machine was busy or the first point ran slow. Run again on an idle machine."
            )
    for p in comparison.points():  # a row whose own figures contradict each other says why
        where = f"at {p.nproc} rank(s), batch {p.batch_size:,}"
        if said := disagreement(where, p.batch_size, p.samples_per_s, p.step_time_s_median):
            notes.append(said)
    notes.append(
        f"{loss_header(comparison)}: each point's global-batch loss once it has seen as many samples "
        "as the first point's whole run."
    )
    return notes


def scale_table(comparison: Comparison) -> str:
    headers, rows = scale_cells(comparison)
    text = table(headers, rows, right=tuple(i for i in range(len(headers)) if i != 1))
    return "\n".join([text, *scale_notes(comparison)])


# ---- terminal charts ---------------------------------------------------------------------------


# ---- files ---------------------------------------------------------------------------------------


def json_text(comparison: Comparison) -> str:
    return strict_json(comparison.to_json(), indent=2) + "\n"


def markdown_text(comparison: Comparison) -> str:
    if comparison.kind == "scale":
        headers, rows = scale_cells(comparison)
        lines = [
            f"# mgpu-tui scale {comparison.scale.mode}",
            "",
            "| " + " | ".join(headers) + " |",
            "|" + "|".join("---" if h == "status" else "---:" for h in headers) + "|",
        ]
        lines += ["| " + " | ".join(cells) + " |" for cells in rows]
        return "\n".join([*lines, "", *scale_notes(comparison)]) + "\n"
    headers, rows = cells(comparison.rows, lambda text: f"**{text}**", str)
    lines = [
        "# mgpu-tui compare",
        "",
        "| " + " | ".join(headers) + " |",
        "|" + "|".join(["---"] * 2 + ["---:"] * (len(headers) - 2)) + "|",
    ]
    lines += ["| " + " | ".join(cells) + " |" for cells in rows]
    lines += [
        "",
        "Bold: best in its column. Settings: "
        + ", ".join(f"{k} {v}" for k, v in dataclasses.asdict(comparison.settings).items() if k != "modes")
        + ".",
    ]
    if comparison.parallel:
        lines.append("The modes ran at the same time and shared this host: not a fair race.")
    return "\n".join(lines) + "\n"


CSV_FIELDS = [
    "mode",
    "status",
    "world_size",
    "devices",
    "samples_per_s",
    "samples_per_s_per_device",
    "tokens_per_s",
    "tokens_per_s_per_device",
    "step_time_s_median",
    "tflops_per_device",
    "mfu",
    "peak_mem_bytes",
    "final_loss",
    "duration_s",
    "run_dir",
    "root_cause",
]


def csv_text(comparison: Comparison) -> str:
    out = io.StringIO()
    if comparison.kind == "scale":
        fields = [
            "nproc",
            "status",
            "batch_size",
            "lr",
            "samples_per_s",
            "tokens_per_s",
            "speedup",
            "efficiency",
            "step_time_s_median",
            "step_time_s_mean",
            "peak_mem_bytes",
            "loss_step",
            "loss_after_common_samples",
            "final_loss",
            "run_dir",
        ]
        writer = csv.DictWriter(out, fieldnames=fields, lineterminator="\n")
        writer.writeheader()
        for point in comparison.points():
            record = point.to_json()
            writer.writerow({k: "" if record[k] is None else record[k] for k in fields})
        return out.getvalue()
    writer = csv.DictWriter(out, fieldnames=CSV_FIELDS, lineterminator="\n")
    writer.writeheader()
    for r in comparison.rows:
        record = r.to_json()
        writer.writerow({k: "" if record[k] is None else record[k] for k in CSV_FIELDS})
    return out.getvalue()


def file_text(comparison: Comparison, suffix: str) -> str:
    return {".json": json_text, ".md": markdown_text, ".csv": csv_text}[suffix](comparison)


def png_bytes(comparison: Comparison) -> bytes | None:
    """The charts as a PNG, or None when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")  # no display: render to memory
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    if comparison.kind == "scale":
        points = [p for p in comparison.points() if p.speedup is not None]
        fig, (ax, loss) = plt.subplots(1, 2, figsize=(11, 4))
        by_batch = comparison.scale.sweep == "batch"
        n = [p.batch_size if by_batch else p.nproc for p in points]
        ax.plot(n, [p.speedup for p in points], "o-", label="measured")
        if not by_batch:
            ax.plot(n, [x / n[0] for x in n] if n else [], "--", label="ideal")
        ax.set_xlabel("global batch" if by_batch else "ranks")
        ax.set_ylabel("speedup")
        ax.legend()
        for r in comparison.rows:  # the loss against samples seen: comparable across batches
            if r.loss_curve and r.batch_size:
                loss.plot(
                    [s * r.batch_size for s, _ in r.loss_curve],
                    [v for _, v in r.loss_curve],
                    label=f"{r.world_size} rank(s), batch {r.batch_size}",
                )
        loss.set_xlabel("samples")
        loss.set_title("loss (global batch)")
        loss.legend(fontsize="small")
        fig.suptitle(f"mgpu-tui scale {comparison.scale.mode} ({comparison.scale.sweep})")
    else:
        rows = comparison.rows
        fig, axes = plt.subplots(2, 2, figsize=(11, 7))
        names = [r.name for r in rows]
        axes[0][0].bar(names, [r.samples_per_s or 0 for r in rows])
        axes[0][0].set_title("samples/s")
        axes[0][1].bar(names, [(r.peak_mem_bytes or 0) / 2**20 for r in rows])
        axes[0][1].set_title("peak memory, largest rank (MiB)")
        # Each line its own dash and marker: equal curves (the same function trained) stay visible.
        styles = [("-", "o"), ("--", "s"), (":", "^"), ("-.", "D"), ((0, (5, 1)), "v"), ((0, (1, 3)), "x")]
        every = max(2, min(len(rows), len(styles)))  # each line's markers on points of its own
        for index, (r, (dash, marker)) in enumerate(zip(rows, itertools.cycle(styles))):
            at = (index % every, every)
            look = {"label": r.name, "linestyle": dash, "marker": marker, "markevery": at, "markersize": 4}
            if r.loss_curve:
                axes[1][0].plot(*zip(*r.loss_curve), **look)
            if r.throughput_curve:
                axes[1][1].plot(*zip(*r.throughput_curve), **look)
        axes[1][0].set_title("loss (global batch)")
        axes[1][1].set_title("samples/s per step")
        for ax in axes[1]:
            ax.set_xlabel("step")
            ax.legend(fontsize="small")
        fig.suptitle("mgpu-tui compare")
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    plt.close(fig)
    return buffer.getvalue()
