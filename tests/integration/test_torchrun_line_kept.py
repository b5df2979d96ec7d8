"""The drop-in's line read by torchrun's parser once (mgpu_tui/commands/launchers/torchrun_cache.py):
run again, the same line is launched from the answer kept, with no second import of torch before the
job's torchrun. Proven by what the job is given: an answer planted in the cache for that line is the
one launched, so the parser did not run."""

import json
import os
import subprocess

from conftest import CLI

SCRIPT = "import sys\nprint('ARGS', sys.argv[1:], flush=True)\n"


def test_the_same_line_is_launched_from_the_answer_kept(tmp_path):
    (tmp_path / "args.py").write_text(SCRIPT)
    env = {**os.environ, "MGPU_CACHE_DIR": str(tmp_path / "cache")}
    line = [*CLI, "torchrun", "--run-dir", "runs", "--nproc-per-node", "1", "args.py", "given"]
    first = subprocess.run(line, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    assert "ARGS ['given']" in first.stdout
    (kept,) = (tmp_path / "cache" / "torchrun-lines").glob("*.json")
    answer = json.loads(kept.read_text())
    assert answer["torchrun"]["program"] == "args.py" and answer["torchrun"]["args"] == ["given"]
    answer["torchrun"]["args"] = ["from the cache"]
    kept.write_text(json.dumps(answer))
    again = subprocess.run(line, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert "ARGS ['from the cache']" in again.stdout  # the kept answer: torchrun's parser never ran
    off = subprocess.run(
        line,
        cwd=tmp_path,
        env={**env, "MGPU_TORCHRUN_CACHE": "0"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert off.returncode == 0 and "ARGS ['given']" in off.stdout, off.stderr  # turned off: parsed
