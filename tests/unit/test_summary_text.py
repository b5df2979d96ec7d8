"""What the summary's text and the run listings say in words (issue #31): one word for a stopped run
everywhere a person reads it ("stopped"; the JSON keeps its documented "interrupted"), and why a
rank's samples/s is n/a."""

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


def test_a_rank_that_counts_no_samples_by_design_says_why_beside_the_jobs_rate(tmp_path):
    import dataclasses

    path = good_run(tmp_path / "runs", "20260101-000000-tp")
    summary = read_run(path).summary
    peer = dataclasses.replace(summary.ranks[1], samples_per_s=None)
    text = summary_text(dataclasses.replace(summary, ranks=(summary.ranks[0], peer)))
    assert "samples/s n/a for rank(s) 1: they count no samples by design" in text
    assert "count no samples" not in summary_text(summary)  # every rank with its rate: nothing to say


def test_the_listings_name_a_runs_model_where_it_is_not_the_quick_mlp(tmp_path, capsys):
    """Issue #31: the Runs view and `runs` showed 'ddp' for a gpt-tiny run and an MLP run alike."""
    root = tmp_path / "runs"
    good_run(root, "20260101-000000-ddp")  # the MLP
    gpt = good_run(root, "20260101-000001-ddp")
    document = json.loads((gpt / "spec.json").read_text())
    document["spec"]["model"] = "gpt-tiny"
    (gpt / "spec.json").write_text(json.dumps(document))
    assert main(["runs", "--run-dir", str(root)]) == 0
    rows = capsys.readouterr().out.splitlines()[2:]
    assert "ddp · gpt-tiny" in rows[0] and "·" not in rows[1]
    assert main(["runs", "--run-dir", str(root), "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)["runs"]
    assert [(r["what"], r["model"]) for r in listed] == [("ddp", "gpt-tiny"), ("ddp", "mlp")]
