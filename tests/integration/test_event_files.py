"""The engine follows a rank's event file by its descriptor: deleted mid-run, no event is missed."""

import subprocess

from conftest import CLI, live_processes_of, read_summary


def test_an_event_file_deleted_mid_run_is_still_followed(tmp_path):
    # Also the one-process launch path end to end: its table, its logs, --verify.
    proc = subprocess.Popen(
        [*CLI, "run", "single", "--steps", "60", "--device", "cpu", "--verify", "--run-dir", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    seen = []
    for line in proc.stderr:  # the progress lines: the engine has read the file by now
        seen.append(line)
        if line.startswith("step "):
            events = next(tmp_path.glob("*/events/rank0.jsonl"))
            events.unlink()  # mid-run: the rank goes on writing to the unlinked file
            break
    out, err = proc.communicate(timeout=120)
    err = "".join(seen) + err
    assert "Traceback" not in err, err
    assert proc.returncode == 0 and "status ok" in out and "rank 0" in out and "samples/s" in out
    run_dir = events.parent.parent
    summary = read_summary(run_dir / "summary.json")
    # The engine follows the deleted file by its descriptor: no event was missed.
    assert summary.steps == 60 and summary.ranks[0].done and summary.world_size == 1
    assert summary.verify.ok and summary.verify.max_abs_diff <= 1e-5
    # One process is rank 0 itself: its output is where torchrun would have put it.
    assert (run_dir / "logs/python/attempt_0/0/stdout.log").read_text().count("[rank 0] step") == 10
    assert not events.exists() and live_processes_of(run_dir) == []
