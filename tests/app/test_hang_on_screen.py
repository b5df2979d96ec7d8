"""Issue 56: the app says what the CLI knows of a hang. A script's rank stops in plain Python; the
stall watch names it ("rank 1 never entered all_reduce(...) #N; rank 0 has waited in it for S s;
rank 1 is in <module> at hang.py:L"), and the Run view says it while the run goes, keeps it after
`s`, says it again in a replay, and the Runs view and `mgpu-tui runs` give it as the run's why.
On 8177ed0 the screen kept an old "slow in compute" note, then "Stopped: 8 steps" with no word of
the hang, and `runs` listed the run as stopped with an empty why. (A command's mp.spawn ranks, and
the layout at 80x24 and 160x45: test_app_tmux.py.)"""

import json
import re
import textwrap

import pytest
from textual.widgets import DataTable, Static
from waiting import wait_for

from conftest import cli_in_process, live_processes_of, only_run_dir
from mgpu_tui.app import create_app
from mgpu_tui.app.views.run.view import RunView
from mgpu_tui.app.widgets.status_line import StatusLine
from mgpu_tui.engine.launch.spec import LaunchSpec

HANG = """
    import time
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(1, 10_000):
        model(torch.randn(4, 8)).pow(2).mean().backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
        optimizer.step()
        optimizer.zero_grad()
        if step == 8 and dist.get_rank() == 1:
            time.sleep(3600)  # rank 1 stops here, in plain Python
"""
# The verdict, as the flight records and rank 1's stack give it (the line of the sleep above).
VERDICT = (
    r"stalled for 15 s: rank 1 never entered all_reduce\(float32\[[\d, ]+\]\) #\d+ \(default group\); "
    r"rank 0 has waited in it for \d+ s; rank 1 is in <module> at hang\.py:16"
)


def said(app, widget_id: str) -> str:
    return " ".join(str(app.query_one(widget_id).render()).split())  # its words, wrapped lines joined


def states(view: RunView) -> dict[str, str]:
    return {row[0]: row[1] for row in view.rank_table.rank_rows}


@pytest.mark.timeout(300)
async def test_a_scripts_hang_is_on_screen_live_after_s_in_its_replay_and_in_the_runs_why(tmp_path, capsys):
    (tmp_path / "hang.py").write_text(textwrap.dedent(HANG))
    runs = tmp_path / "runs"
    spec = LaunchSpec(
        mode="script",
        script=str(tmp_path / "hang.py"),
        nproc=2,
        device="cpu",
        stall_timeout=15,
        run_root=runs,
    )
    app = create_app(start=spec, telemetry=[], topology=None, run_root=runs)
    seen: set[str] = set()  # every state rank 1 was shown in
    async with app.run_test(size=(160, 50)) as pilot:
        view = app.query_one(RunView)

        def hang_said() -> bool:
            seen.add(states(view).get("rank 1", ""))
            return "Hang: stalled for 15 s" in said(app, "#root-cause")

        # While the run goes (a script's stall is reported; the run goes on until s).
        assert await wait_for(pilot, hang_said, timeout=240), said(app, "#root-cause")
        assert re.search(f"Hang: {VERDICT}", said(app, "#root-cause")), said(app, "#root-cause")
        assert app.jobs.runs.active and states(view) == {"rank 0": "stalled", "rank 1": "stalled"}
        run_dir = app.jobs.runs.run.run_dir.path
        await pilot.press("s")
        assert await wait_for(pilot, lambda: view.finished, timeout=60)
        await pilot.pause(0.3)
        # Kept after s: the result says the hang, the status line that the run ended in one.
        assert re.search(f"Hung: {VERDICT}", said(app, "#root-cause")), said(app, "#root-cause")
        assert "interrupted after a hang" in str(app.query_one("#run-status", StatusLine).render())
        assert states(view) == {"rank 0": "stalled", "rank 1": "stalled"}  # the hung rank is never done
        assert "done" not in seen

        # The replay of the same run, from its folder.
        app.jobs.runs.follow(run_dir)
        assert await wait_for(pilot, lambda: view.finished and view.stall is not None, timeout=30)
        await pilot.pause(0.3)
        assert re.search(f"Hung: {VERDICT}", said(app, "#root-cause")), said(app, "#root-cause")
        assert states(view) == {"rank 0": "stalled", "rank 1": "stalled"}

        # The Runs view: the hang is the run's why, under the table whole.
        await pilot.press("h")
        table = app.query_one("#runs-table", DataTable)
        assert await wait_for(pilot, lambda: table.row_count == 1, timeout=10)
        detail = " ".join(str(app.query_one("#runs-detail", Static).content).split())
        assert re.search(f"{run_dir.name} · interrupted: hung: {VERDICT}", detail), detail
    assert live_processes_of(run_dir) == []

    # `mgpu-tui runs`, and its JSON: the same why.
    code, out, _ = cli_in_process(capsys, "runs", "--run-dir", str(runs))
    assert code == 0 and "hung: stalled for 15 s: rank 1 never entered all_reduce(float32[" in out, out
    code, out, _ = cli_in_process(capsys, "runs", "--run-dir", str(runs), "--json")
    (record,) = json.loads(out)["runs"]
    assert record["status"] == "interrupted" and record["root_cause"] is None
    assert re.fullmatch(VERDICT, record["stall"]) and record["why"] == f"hung: {record['stall']}"
    assert only_run_dir(runs) == run_dir
