"""One word for a stopped run everywhere a person reads it (issue #31: "stopped" in the Run view,
"interrupted" in the Runs view and the CLI); the JSON keeps its documented "interrupted"."""

import json

from test_hostile_folder import good_run

from mgpu_tui.cli import main
from mgpu_tui.commands.run import summary_text
from mgpu_tui.engine.records.history import read_run


def test_a_stopped_run_reads_stopped_in_text_and_interrupted_in_json(tmp_path, capsys):
    root = tmp_path / "runs"
    path = good_run(root, "20260101-000000-ddp", status="interrupted", exit_code=130)
    assert main(["runs", "--run-dir", str(root)]) == 0
    row = capsys.readouterr().out.splitlines()[-1]
    assert " stopped " in row and "interrupted" not in row
    assert main(["runs", "--run-dir", str(root), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["runs"][0]["status"] == "interrupted"
    head = summary_text(read_run(path).summary).splitlines()[0]
    assert "status stopped " in head
