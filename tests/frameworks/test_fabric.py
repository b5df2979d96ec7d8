"""Lightning Fabric on one device under ``mgpu-tui exec``: the old FLOP count's replay raised a
RuntimeError on the meta device into this job, which died (found by the integrator). Now it runs as
it runs bare, bit for bit (its losses as hex floats, its forward calls, the fingerprints of its
parameters and of torch's, Python's and NumPy's generators, its stdout and stderr, its exit code),
and the watch was there: its steps and a FLOP figure counted."""

import json

from conftest import live_processes_of, summary_from
from frameworks_helpers import SCRIPTS
from watched_steps import bare_and_watched


def test_a_fabric_job_on_one_device_runs_as_bare_with_its_flops_counted(tmp_path):
    bare, watched, done, run_dir = bare_and_watched(tmp_path, None, SCRIPTS / "fabric_one_device.py")
    assert bare["code"] == 0, bare["err.txt"].decode()[-3000:]
    assert watched == bare, (watched, bare)
    assert bare["out.txt"].decode().count(" loss 0x") == 6 and "forwards 6 " in bare["out.txt"].decode()
    summary = summary_from(done.stdout)
    assert summary.status == "ok" and summary.steps == 6, done.stderr[-3000:]
    assert summary.compute is not None and summary.compute.tflops, (summary.compute, done.stderr[-3000:])
    (events,) = (run_dir / "events").glob("*.jsonl")  # a trainer of its own: no process group
    steps = [e for e in map(json.loads, events.read_text().splitlines()) if e["kind"] == "step"]
    # torch's count of the MLP's step: the forward, and twice it backward less the first layer's
    # input gradient. The model is found as the first step ends (no DDP): counted from the second.
    forward = 2 * 8 * (16 * 32 + 32 * 32 + 32 * 4)
    assert [e.get("flops") for e in steps] == [None] + [3 * forward - 2 * 8 * 16 * 32] * 5
    assert live_processes_of(run_dir) == []
