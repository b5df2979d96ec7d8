"""--verify end to end: a baseline trained differently is caught, the verifier run as the engine runs it."""

import json
import subprocess
import sys


def test_verify_run_catches_a_model_trained_differently(tmp_path):
    """Train the baseline with another learning rate; verifying it against lr 0.02 must fail."""
    params = tmp_path / "params"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mgpu_tui.demos.single",
            "--steps",
            "4",
            "--device",
            "cpu",
            "--lr",
            "0.03",
            "--save-params",
            str(params),
        ],
        capture_output=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    check = subprocess.run(
        [
            sys.executable,
            "-m",
            "mgpu_tui.demos.verify",
            "--params-dir",
            str(params),
            "--steps",
            "4",
            "--device",
            "cpu",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    result = json.loads(check.stdout.strip().splitlines()[-1])
    assert result["ok"] is False and result["max_abs_diff"] > 1e-4
