"""--verify: after a run, compare its parameters with the single-device baseline.

The comparison needs torch, so it runs in a child process
(``python -m mgpu_tui.demos.verify``) with the run's own demo arguments: same seed,
data, global batch and precision. The child prints one JSON line (its stdout goes to
``verify.json``, its stderr to ``verify.log``). A :class:`Verification` never blocks:
the run polls it, and stops it with everything else.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass

from mgpu_tui.engine.launch.command import demo_argv
from mgpu_tui.engine.launch.spec import ResolvedSpec
from mgpu_tui.engine.protocol.folder import read_capped
from mgpu_tui.engine.protocol.rundir import RunDir
from mgpu_tui.engine.protocol.typed import build

VERIFY_MODULE = "mgpu_tui.demos.verify"
TIMEOUT_S = 600.0


@dataclass(frozen=True)
class Verify:
    """How the run's parameters compare with the baseline's."""

    ok: bool
    max_abs_diff: float | None = None
    max_rel_diff: float | None = None
    tolerance: float | None = None
    precision: str | None = None  # "float32" or "amp"
    compared: int = 0  # tensors compared
    missing: tuple[str, ...] = ()
    unexpected: tuple[str, ...] = ()
    error: str | None = None  # the comparison itself could not be made

    def describe(self) -> str:
        if self.error:
            return self.error
        text = (
            f"max abs diff {self.max_abs_diff:.2e} vs the baseline "
            f"(tolerance {self.tolerance:.0e}, {self.precision})"
        )
        if self.missing or self.unexpected:
            text += f"; missing {list(self.missing)}, unexpected {list(self.unexpected)}"
        return text

    def to_json(self) -> dict:
        document = asdict(self)
        document["missing"], document["unexpected"] = list(self.missing), list(self.unexpected)
        if self.error is None:
            del document["error"]
        return document

    @classmethod
    def from_json(cls, document: dict) -> Verify:
        return build(cls, document)  # every field checked (protocol/typed.py)


def verify_argv(resolved: ResolvedSpec, run_dir: RunDir, python: str) -> list[str]:
    return [
        python,
        "-m",
        VERIFY_MODULE,
        "--params-dir",
        str(run_dir.params_dir),
        *demo_argv(resolved, run_dir),
    ]


class Verification:
    """The baseline retrained and compared in a child process; poll until it has a :class:`Verify`."""

    def __init__(
        self, resolved: ResolvedSpec, run_dir: RunDir, *, python: str, env: Mapping[str, str]
    ) -> None:
        self.run_dir = run_dir
        self._out = run_dir.verify_out
        with open(self._out, "wb") as stdout, open(run_dir.verify_log, "wb") as stderr:
            self._proc = subprocess.Popen(
                verify_argv(resolved, run_dir, python),
                env=dict(env),
                stdin=subprocess.DEVNULL,
                stdout=stdout,
                stderr=stderr,
            )
        self._deadline = time.monotonic() + TIMEOUT_S

    @property
    def pid(self) -> int:
        return self._proc.pid

    def poll(self) -> Verify | None:
        """The outcome once the child has ended, else None."""
        if self._proc.poll() is None:
            if time.monotonic() < self._deadline:
                return None
            self.stop()
            return Verify(False, error=f"the verification took over {TIMEOUT_S:.0f} s and was stopped")
        return self._read()

    def stop(self) -> None:
        if self._proc.poll() is None:
            self._proc.kill()
        self._proc.wait()

    def _read(self) -> Verify:
        try:
            lines = read_capped(self._out, 1 << 20, tail=True).strip().splitlines()
            return Verify.from_json(json.loads(lines[-1]))
        except (OSError, IndexError, ValueError, TypeError):
            try:
                log = read_capped(self.run_dir.verify_log, 64 * 1024, tail=True)
                tail = log.strip().splitlines()
            except OSError:
                tail = []
            last = tail[-1] if tail else "no output"
            return Verify(False, error=f"the verification failed (exit {self._proc.returncode}): {last}")
