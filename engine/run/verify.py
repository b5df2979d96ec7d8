"""--verify: after a run, compare its parameters with the single-device baseline.

The comparison needs torch, so it runs in a child process
(``python -m mgpu_tui.demos.verify``) with the run's own demo arguments: same
seed, data, global batch and precision. The child prints one JSON line.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping

from mgpu_tui.engine.launch.command import demo_argv
from mgpu_tui.engine.launch.spec import ResolvedSpec
from mgpu_tui.engine.run.rundir import RunDir

VERIFY_MODULE = "mgpu_tui.demos.verify"


def verify_argv(resolved: ResolvedSpec, run_dir: RunDir, python: str) -> list[str]:
    return [python, "-m", VERIFY_MODULE, "--params-dir", str(run_dir.params_dir),
            *demo_argv(resolved, run_dir)]  # fmt: skip


def run_verify(resolved: ResolvedSpec, run_dir: RunDir, *, python: str, env: Mapping[str, str]) -> dict:
    """The comparison as a dict (``ok`` and the figures), or ``ok: false`` with an ``error``."""
    log = run_dir.path / "verify.log"
    with open(log, "wb") as stderr:
        done = subprocess.run(
            verify_argv(resolved, run_dir, python),
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=stderr,
            timeout=600,
        )
    lines = done.stdout.decode(errors="replace").strip().splitlines()
    try:
        result = json.loads(lines[-1])
    except (IndexError, ValueError):
        tail = log.read_text(errors="replace").strip().splitlines()[-1:] or ["no output"]
        return {"ok": False, "error": f"the verification failed (exit {done.returncode}): {tail[0]}"}
    return result
