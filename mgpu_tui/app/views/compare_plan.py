"""The Compare view's plan, before anything runs: each mode's memory for the form's model, ranks,
batch and precision (engine/planning/memory.py), checked against this machine's GPUs, or against
the host's memory that CPU ranks share; and the table that shows it, the verdict first."""

from __future__ import annotations

from rich.text import Text

from mgpu_tui.console import fmt_bytes, plain
from mgpu_tui.engine.launch.spec import LaunchSpec, workload_of
from mgpu_tui.engine.machine.host import Host
from mgpu_tui.engine.planning.defaults import DEFAULTS
from mgpu_tui.engine.planning.memory import ModePlan, Training, fit, needed, plan_run
from mgpu_tui.engine.planning.modes import MODES


def planned(
    template: LaunchSpec, host: Host, gpu_mem: int | None, host_mem: int | None
) -> tuple[LaunchSpec, list[ModePlan], bool, str] | None:
    """Each mode's plan for ``template``, marked against the memory it would use here; whether the
    ranks share that memory (CPU ranks); what that memory is, in words. None: no workload yet."""
    try:
        model = workload_of(template)
    except ValueError:
        return None
    cuda = template.device == "cuda" or (template.device == "auto" and host.has_cuda)
    limit, shared = (gpu_mem, False) if cuda else (host_mem, True)
    if not limit:
        what = "nothing yet (the memory is being read)"
    elif cuda:
        what = f"each GPU's {fmt_bytes(limit)}"
    else:
        what = f"the host's {fmt_bytes(limit)}, which CPU ranks share"
    training = Training(amp=template.amp, batch_size=template.batch_size)
    if template.nproc is None:  # the form always gives one
        return None
    plans = [
        fit(
            plan_run(name, model, template.nproc, training, stages=DEFAULTS.stages, gpu_count=host.gpu_count),
            limit,
            shared=shared,
        )
        for name in MODES
    ]
    return template, plans, shared, what


def plan_table(template: LaunchSpec, plans: list[ModePlan], shared: bool) -> tuple[list[str], list[list]]:
    """(headers, rows): a mode's fullest device a row, the verdict first (a narrow terminal shows
    the first columns). On the CPU every rank (and each stage of mp) lives in the host's memory:
    they add up."""
    headers = [
        "mode",
        "fits",
        "all ranks" if shared else "total",
        "ranks" if shared else "GPUs",
        "fullest",
        "state",
        "activations",
        "buffers",
    ]
    rows: list[list] = []
    for p in plans:
        mode = MODES[p.mode]
        count = str((template.nproc if mode.multi_process else 1) if shared else p.gpus)
        if not p.devices:
            rows.append([p.mode, "n/a", "", count, Text(plain(p.note or ""), style="dim"), "", "", ""])
            continue
        d = max(p.devices, key=lambda d: d.total)
        fits = "n/a" if p.fits is None else Text("yes", "green") if p.fits else Text("NO", "red")
        if shared:  # no GPUs: a one-process mode's place is its rank; mp's, its stages
            where = d.device.replace("GPU", "stage" if mode.stages_are_devices else "rank")
        else:
            where = d.device
        rows.append(
            [
                p.mode,
                fits,
                fmt_bytes(needed(p, shared=shared)),
                count,
                where,
                fmt_bytes(d.state),
                fmt_bytes(d.activations),
                fmt_bytes(d.buffers),
            ]
        )
    return headers, rows


def plan_caption(what: str) -> Text:
    """What the plan's table shows, and against what (``what``: the memory it is checked against)."""
    return Text(
        f"The plan, before anything runs: each mode's fullest device for this model, ranks, batch "
        f"and precision: total at its peak in backward, state (parameters, gradients, optimizer) "
        f"at rest; activations are an estimate: docs/compare.md. Checked against {what}; a mode "
        f"that cannot fit is greyed out.\n",
        style="dim",
    )
