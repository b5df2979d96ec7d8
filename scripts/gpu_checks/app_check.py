"""app: the app in tmux for 30 s with a run on the GPU, the screen checked and kept, and an SVG of the
Run view."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

from gpu_checks.base import ROOT, CheckerBase, Result


class AppCheck(CheckerBase):
    def app(self) -> Result:
        """The app in a real terminal (tmux, 160x50) for 30 s with a 2-rank ddp run on the GPU."""
        if shutil.which("tmux") is None:
            return Result("app", False, "tmux is not installed: cannot drive the app in a terminal")
        start = time.monotonic()
        session = f"mgpu-gpu-check-{os.getpid()}"
        share = ["--share-gpus"] if self.gpus < 2 else []
        command = " ".join(
            [
                *self.mgpu(
                    "run",
                    "ddp",
                    "--nproc",
                    "2",
                    "--device",
                    "cuda",
                    "--steps",
                    "1000000",
                    "--run-dir",
                    str(self.out / "runs"),
                    *share,
                    "--tui",
                )
            ]
        )
        subprocess.run(
            [
                "tmux",
                "new-session",
                "-d",
                "-s",
                session,
                "-x",
                "160",
                "-y",
                "50",
                f"cd {self.out} && {command}; echo APP-EXIT $?; sleep 600",
            ],
            check=True,
        )

        def screen() -> str:
            return subprocess.run(
                ["tmux", "capture-pane", "-p", "-t", session], capture_output=True, text=True
            ).stdout

        try:
            time.sleep(30)
            run_view = screen()
            subprocess.run(["tmux", "send-keys", "-t", session, "d"])
            time.sleep(2.5)
            dashboard = screen()
            subprocess.run(["tmux", "send-keys", "-t", session, "q"])
            time.sleep(1)
            subprocess.run(["tmux", "send-keys", "-t", session, "y"])
            deadline = time.monotonic() + 30
            while "APP-EXIT" not in screen() and time.monotonic() < deadline:
                time.sleep(0.5)
            ending = screen()
        finally:
            subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
        (self.out / "app-run-view.txt").write_text(run_view)
        (self.out / "app-dashboard.txt").write_text(dashboard)
        rows = [line for line in run_view.splitlines() if line.strip().startswith(("rank 0", "rank 1"))]
        exited = "APP-EXIT 0" in ending
        left = subprocess.run(
            ["pgrep", "-f", "mgpu_tui.demos.ddp"], capture_output=True, text=True
        ).stdout.split()
        ok = len(rows) >= 2 and "running" in run_view and "GPU0" in dashboard and exited and not left
        shown = "; ".join(" ".join(r.split()) for r in rows)[:120]
        detail = (
            f"after 30 s: {len(rows)} rank rows ({shown}); dashboard shows GPU0: "
            f"{'GPU0' in dashboard}; q, y exit 0: {exited}; ranks left: {len(left)}"
        )
        self.screenshot(self.out / "gpu-run-view.svg")
        return Result("app", ok, detail, time.monotonic() - start)

    def screenshot(self, target: Path) -> None:
        """An SVG of the Run view during a real 2-rank ddp run on the GPU (Textual's Pilot)."""
        share = ["--share-gpus"] if self.gpus < 2 else []
        script = str(ROOT / "scripts" / "screenshot-run-view.py")
        done = self.sh(
            "screenshot",
            [self.python, script, "--device", "cuda", *share, "--steps", "1500", "--out", str(target)],
            300,
        )
        print(f"gpu-check: screenshot {'saved as ' + str(target) if done.returncode == 0 else 'FAILED'}")
