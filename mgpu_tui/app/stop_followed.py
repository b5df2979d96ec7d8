"""Stopping a run the app did not start (one it follows): always after the user said yes, and
never by a pid of another machine.

A Slurm job's run is stopped the way Slurm stops it, ``scancel`` of the job (every node then says
"cancelled"), from whatever host the app runs on, once its own monitor vouches for the job
(FollowedRun.why_not_cancellable); any other run is stopped by asking its monitor,
on this machine, by the very process the user was asked about (engine/run/monitor.py).
"""

from __future__ import annotations

import threading

from textual.app import App

from mgpu_tui.app.views.confirm import Confirm
from mgpu_tui.console import plain
from mgpu_tui.engine.records.follow import FollowedRun


def stop_followed(app: App, run: FollowedRun) -> None:
    """Ask, then stop ``run``; every outcome is said in a notification."""
    job = run.recorded_spec.slurm
    if job is not None:
        _cancel_slurm_job(app, run, job.job_id, job.nodelist)
        return
    monitor = run.monitor()
    if monitor is None:
        app.notify("Nothing follows this run any more: it has ended.", severity="warning")
        return
    if reason := monitor.why_not_stoppable():
        app.notify(plain(reason), title="Cannot stop", severity="error", timeout=8, markup=False)
        return

    def answered(yes: bool | None) -> None:
        if not yes:
            return
        try:
            run.stop(monitor)  # that very process, checked again: it may have ended since
        except (PermissionError, ProcessLookupError) as exc:
            app.notify(plain(str(exc)), title="Cannot stop", severity="error", timeout=8, markup=False)
            return
        app.notify("Asked the run's monitor to stop every rank…")

    question = (
        f"This run was started elsewhere (its monitor is pid {monitor.pid}, "
        f"user {monitor.owner}). Stop it and every rank?"
    )
    app.push_screen(Confirm(question), answered)


def _cancel_slurm_job(app: App, run: FollowedRun, job_id: str, nodelist: str) -> None:
    def cancel() -> None:  # scancel may wait on the controller: never on the UI thread
        error = run.cancel_slurm_job()
        if error:
            app.call_from_thread(
                app.notify, plain(error), title="Cannot stop", severity="error", markup=False
            )
        else:
            app.call_from_thread(app.notify, f"Cancelled Slurm job {job_id}: every node stops its ranks…")

    def answered(yes: bool | None) -> None:
        if yes:
            threading.Thread(target=cancel, name=f"scancel-{job_id}", daemon=True).start()

    def ask() -> None:  # the folder's word alone never picks a job; checking may ask Slurm (scontrol)
        if reason := run.why_not_cancellable():
            app.call_from_thread(
                app.notify, plain(reason), title="Cannot stop", severity="error", timeout=8, markup=False
            )
            return
        question = (
            f"This run is Slurm job {job_id} on {nodelist}. Cancel the job (scancel {job_id}) and every rank?"
        )
        app.call_from_thread(app.push_screen, Confirm(plain(question)), answered)

    threading.Thread(target=ask, name=f"check-{job_id}", daemon=True).start()
