"""A model stepped as a rank steps it, its FLOPs counted by the watch's own code (flops/, and
model_root's hooks); torch's FlopCounterMode on a step, the independent count tests hold it to
(tests/unit/test_flop_count.py, tests/frameworks/test_flops.py). And a job run bare and under
``mgpu-tui exec`` at once, with what it observed of each (tests/integration/test_watch_invisible.py,
tests/frameworks/test_onnx_after_training.py)."""

import re
import shlex
import subprocess
import sys
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode

from conftest import CLI, REPO, only_run_dir
from mgpu_tui.engine.rank.watch import flops, wrapping
from mgpu_tui.engine.rank.watch.model_root import HookedRoot
from mgpu_tui.engine.rank.watch.step_clock import StepClock

SCRIPT = REPO / "tests" / "scripts" / "watch_invisible.py"


def square_mean(out):
    return out.float().square().mean()


class Watched:
    """A model with the watch's own root hooks (model_root.HookedRoot) and a StepFlops, stepped as
    a rank steps it: the forward through its hooks, backward() inside the count's window."""

    def __init__(self, model) -> None:
        self.model, self.counted = model, flops.StepFlops(torch)
        root = HookedRoot(self._before, StepClock(), self.counted.forward_ends)
        root.torch = torch
        root.hook(model, "the model")

    def _before(self, module, args, kwargs) -> None:
        if module.training and torch.is_grad_enabled():
            self.counted.forward_begins(module, args, kwargs)

    def step(self, *inputs, loss_of=square_mean, micro_batches: int = 1, **kwargs) -> flops.Counted:
        """A step: its micro-batches' forward and backward, its gradients left in .grad."""
        self.model.zero_grad(set_to_none=True)
        for _ in range(micro_batches):
            loss = loss_of(self.model(*inputs, **kwargs))
            self.counted.backward_begins(False)
            try:
                loss.backward()
            finally:
                self.counted.backward_ends()
        return self.counted.total()


def torchs_count(model, *inputs, loss_of=square_mean, **kwargs) -> int:
    """torch's own counter over one real eager step (forward and backward), the watch's hooks set
    aside (a Watched model's count must not see this step)."""
    flops.register_missing_formulas(torch)
    with wrapping.hooks_set_aside(), FlopCounterMode(display=False) as counter:
        loss_of(model(*inputs, **kwargs)).backward()
    model.zero_grad(set_to_none=True)
    return counter.get_total_flops()


# torch's own log lines start with their time and pid (``W1128 11:21:41.126000 20477 ...``: the ONNX
# exporter's, where onnx is installed): the same line, run after run, but for those.
LOG_PREFIX = re.compile(rb"^([IWEF])\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ ", re.MULTILINE)


def observed(folder: Path, done: subprocess.CompletedProcess) -> dict:
    """What the job saw: its own stdout and stderr (redirected by its own shell), its file, its code."""
    names = [name for name in ("out.txt", "err.txt", "model.pt") if (folder / name).exists()]
    files = {name: (folder / name).read_bytes() for name in names}
    files.update({name: LOG_PREFIX.sub(rb"\1 ", files[name]) for name in names if name.endswith(".txt")})
    return {"code": done.returncode, **files}


def bare_and_watched(
    tmp_path: Path, shape: str | None, script: Path = SCRIPT
) -> tuple[dict, dict, subprocess.CompletedProcess, Path]:
    """The job (``script``, with ``--shape shape`` where given) run both ways at once (each is
    seconds of starting torch), each in a folder of its own."""
    line = [sys.executable, str(script), *(["--shape", shape] if shape else [])]
    job = f"{shlex.join(line)} > out.txt 2> err.txt"
    runs = tmp_path / "runs"
    lines = {
        "bare": ["sh", "-c", job],
        "watched": [*CLI, "exec", "--run-dir", str(runs), "--json", "--", "sh", "-c", job],
    }
    started = {}
    for how, argv in lines.items():
        (tmp_path / how).mkdir()
        started[how] = subprocess.Popen(
            argv, cwd=tmp_path / how, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
    ended = {}
    for how, proc in started.items():
        out, err = proc.communicate(timeout=300)
        ended[how] = subprocess.CompletedProcess(lines[how], proc.returncode, out, err)
    bare = observed(tmp_path / "bare", ended["bare"])
    watched = observed(tmp_path / "watched", ended["watched"])
    return bare, watched, ended["watched"], only_run_dir(runs)
