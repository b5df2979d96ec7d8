"""What a script's rank says it ran on when no loss told it (engine/rank/watch/script_watch.py's about):
the CPU only where CUDA was never started; else unknown. On a GPU, a script that failed in its first
forward was summarised as a CPU run (docs/gpu-validation.md)."""

import torch

from mgpu_tui.engine.rank.watch.script_watch import ScriptWatch


class Reporter:
    def __init__(self) -> None:
        self.said: list[dict] = []

    def about(self, **fields) -> None:
        self.said.append(fields)


def about_with_no_loss(monkeypatch, cuda_started: bool) -> dict:
    reporter = Reporter()
    watch = ScriptWatch(reporter, "train.py")
    watch.torch = torch  # as after the script's import torch; no hook is installed here
    # The one fact a GPU process differs in here: CUDA was started (absent hardware on this machine).
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: cuda_started)
    watch._say_about(0)
    (said,) = reporter.said
    return said


def test_a_process_that_never_started_cuda_ran_on_the_cpu(monkeypatch):
    assert about_with_no_loss(monkeypatch, cuda_started=False)["device"] == "cpu"


def test_a_process_that_started_cuda_and_saw_no_loss_says_unknown(monkeypatch):
    said = about_with_no_loss(monkeypatch, cuda_started=True)
    assert said["device"] == "unknown" and said["device_uuid"] is None


def test_a_complex_loss_is_no_loss_and_no_warning_of_torchs_reaches_the_script(recwarn):
    """float() of a complex tensor prints torch's casting warning into the script's stderr."""
    watch = ScriptWatch(Reporter(), "train.py")
    watch.torch = torch
    watch.on_backward(torch.tensor(1.0 + 2.0j))
    watch.on_backward(torch.tensor(0.5))
    assert len(watch._losses) == 1 and float(watch._losses[0]) == 0.5
    assert not [w for w in recwarn if "complex" in str(w.message).lower()]
