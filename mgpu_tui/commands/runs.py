"""``mgpu-tui runs``: the past runs of a folder, newest first (``--json`` for scripts); ``mgpu-tui open``:
the app on one of them."""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import sys
import time
from pathlib import Path

from mgpu_tui.console import fmt_loss, fmt_rate, fmt_seconds, plain, status_word, table
from mgpu_tui.engine.protocol.folder import dumps as strict_json
from mgpu_tui.engine.protocol.rundir import is_spec_file
from mgpu_tui.engine.records.history import RecordStatus, list_runs, read_run
from mgpu_tui.errors import ExitCode, UsageError


def _root(args: argparse.Namespace) -> Path:
    root = Path(args.run_dir)
    if root.exists() and not root.is_dir():
        raise UsageError(f"{root} is a file, not a folder of runs.")
    return root


def open_command(args: argparse.Namespace) -> int:
    """Check the folder before any screen opens (one sentence and exit 2 when it is no run)."""
    root = _root(args)
    if args.run == "latest":
        usable = [r for r in list_runs(root) if r.status is not RecordStatus.BROKEN]
        if not usable:
            raise UsageError(f"there is no run under {root} to open (mgpu-tui run MODE makes one).")
        path = Path(usable[0].path)
    elif args.run.isdigit() and not Path(args.run).exists():  # a Slurm job id
        steps = [
            r for r in list_runs(root) if r.slurm_job == args.run and r.status is not RecordStatus.BROKEN
        ]
        if not steps:
            raise UsageError(
                f"no run of Slurm job {args.run} under {root}: give the job's --run-dir (a folder every "
                "node mounts), or the run folder itself."
            )
        path = Path(steps[0].path)  # the newest step
    else:
        path = Path(args.run)
        named = root / args.run  # the name `runs` prints in its folder column
        if not path.exists() and os.sep not in args.run and named.is_dir():
            path = named
        if not path.is_dir():
            what = "is not a folder" if path.exists() else "does not exist"
            raise UsageError(
                f"{path} {what}: give a run folder, its name in {root} (as `mgpu-tui runs` lists it), "
                "or `latest`."
            )
        record = read_run(path)
        if record.status is RecordStatus.BROKEN:
            raise UsageError(f"{path} cannot be opened: {record.reason}.")
    from mgpu_tui.commands.run import start_metrics
    from mgpu_tui.commands.tui import tui_command

    return tui_command(None, open_run=path, run_root=root, metrics=start_metrics(args, linger=False))


# What deleting may remove: runs that ended, however they ended. Never one that goes (running), nor
# a folder that is not a run, or one unreadable (broken: it may be anything of the user's).
ENDED = ("ok", "failed", "interrupted")  # a summary says how it ended
DELETABLE = (*ENDED, "cut off", "unfinished")


def delete_old_runs(root: Path, days: float, yes: bool) -> int:
    """Delete the runs under ``root`` started more than ``days`` ago, after the user said yes (or
    ``--yes``): each a folder directly inside ``root`` and no link, removed without following one."""
    cutoff = time.time() - days * 86400
    old = [
        r
        for r in list_runs(root)
        if r.status in DELETABLE and r.created_at is not None and r.created_at < cutoff
    ]
    doomed = [Path(r.path) for r in old if Path(r.path).parent == root and not Path(r.path).is_symlink()]
    if not doomed:
        print(plain(f"no run under {root} is older than {days:g} day(s); nothing deleted"))
        return ExitCode.OK
    for path in doomed:
        print(plain(f"  {path.name}"))
    question = f"Delete these {len(doomed)} run(s) under {root}?"
    if not yes:
        if not sys.stdin.isatty():
            raise UsageError(f"{question} Nothing was deleted: say yes with --yes (no terminal to ask).")
        if input(f"{question} [y/N] ").strip().lower() not in ("y", "yes"):
            print("nothing deleted")
            return ExitCode.OK
    kept = {path: why for path in doomed if (why := _delete_run(path))}
    for path, why in kept.items():
        print(
            plain(f"mgpu-tui: {path.name} was not deleted ({why}); it is still a run, to delete again"),
            file=sys.stderr,
        )
    print(plain(f"deleted {len(doomed) - len(kept)} run(s) under {root}"))
    return ExitCode.FAILED if kept else ExitCode.OK


def _delete_run(path: Path) -> str | None:
    """Delete one run folder, its marker (spec.json, and each node's spec-node<N>.json) last, so
    that a folder that cannot be emptied stays a run the listing shows, never half of one; None when
    it is gone, else the first reason a file stayed. Nothing is followed: a link is removed as a
    link, a folder removed by rmtree's descriptor walk."""
    failures: list[str] = []

    def failed(function, name, info) -> None:
        failures.append(f"{Path(name).name}: {getattr(info[1], 'strerror', None) or info[1]}")

    markers = []
    try:
        entries = list(os.scandir(path))
    except OSError as exc:
        return exc.strerror or str(exc)
    for entry in entries:
        if is_spec_file(entry.name):
            markers.append(entry.path)
        elif entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path, onerror=failed)
        else:
            try:
                os.unlink(entry.path)
            except OSError as exc:
                failures.append(f"{entry.name}: {exc.strerror or exc}")
    if failures:
        return failures[0]
    for marker in markers:
        try:
            os.unlink(marker)
        except OSError as exc:
            return f"{Path(marker).name}: {exc.strerror or exc}"
    try:
        path.rmdir()
    except OSError as exc:
        return exc.strerror or str(exc)
    return None


def slurm_queue(records: list) -> dict[str, str]:
    """The state squeue gives each Slurm job of ``records`` still unended here; {} without Slurm."""
    live = sorted({r.slurm_job for r in records if r.slurm_job and r.status not in ENDED})
    if not live:
        return {}
    from mgpu_tui.engine.machine.slurm import queue_states

    return queue_states(live)


def runs_command(args: argparse.Namespace) -> int:
    root = _root(args)
    if args.delete_older_than is not None:
        return delete_old_runs(root, args.delete_older_than, args.yes)
    records = list_runs(root)
    queue = slurm_queue(records)
    if args.json:
        runs = [{**r.to_json(), "slurm_state": queue.get(r.slurm_job or "")} for r in records]
        print(strict_json({"run_dir": str(root), "runs": runs}))
        return ExitCode.OK
    if not records:
        print(plain(f"no runs under {root} yet (mgpu-tui run MODE --run-dir {root} makes one)"))
        return ExitCode.OK
    rows = []
    for r in records:
        s = r.summary
        when = dt.datetime.fromtimestamp(r.created_at).strftime("%Y-%m-%d %H:%M:%S") if r.created_at else "?"
        nodes = f" on {r.nnodes}" if (r.nnodes or 1) > 1 else ""
        ranks = "?" if r.world_size is None else f"{r.world_size}{nodes}"
        detail = r.why or ""
        if r.slurm_job:  # the job as the scheduler has it now, where it still answers
            state = queue.get(r.slurm_job) or (s.stopped_by if s else None)  # squeue's, else how it ended
            job = f"Slurm job {r.slurm_job}" + (f" {state}" if state else "")
            detail = f"{job}; {detail}" if detail else job
        rows.append(
            [
                when,
                r.label,
                ranks,
                status_word(r.status),
                fmt_seconds(s.duration_s) if s else "n/a",
                fmt_rate(s.samples_per_s) if s else "n/a",
                fmt_loss(s.final_loss) if s else "n/a",
                Path(r.path).name,
                detail[:100],
            ]
        )
    headers = ["started", "what", "ranks", "status", "took", "samples/s", "loss", "folder", "why"]
    if any(r.comparison for r in records):  # the comparison each run was a row of, where any was
        headers.insert(-1, "comparison")
        for row, r in zip(rows, records):
            row.insert(-1, r.comparison or "")
    print(plain(table(headers, rows, right=(2, 4, 5, 6))))  # names and causes from the runs: text only
    return ExitCode.OK
