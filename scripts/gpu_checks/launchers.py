"""launchers (the third round, issue 46): Lightning strategy=ddp on the GPU under mgpu-tui exec and the
torchrun drop-in, a one-process Hugging Face Trainer against its own samples/s, accelerate with one
process."""

from __future__ import annotations

import time

from gpu_checks.base import ROOT, CheckerBase, Result, json_summary, result_line

FRAMEWORKS = ROOT / "tests" / "frameworks" / "scripts"


class LauncherChecks(CheckerBase):
    lightning_args = [
        "--devices",
        "1",
        "--accelerator",
        "gpu",
        "--strategy",
        "ddp",
        "--samples",
        "512",
        "--epochs",
        "2",
    ]
    hf_env = {"HF_ON_GPU": "1", "HF_STEPS": "200"}

    def _exec(self, runs: str, *command: str) -> list[str]:
        """`mgpu-tui exec` of ``command``, its runs under ``runs``, its summary as JSON."""
        return self.mgpu("exec", "--json", "--run-dir", str(self.out / runs), "--", *command)

    def _job(self, name: str, argv: list[str], env: dict | None = None) -> tuple:
        """(the finished process, its summary, the job's own RESULT line), its output in <name>.log."""
        done = self.sh(name, argv, 240, env=env)
        return done, json_summary(done.stdout), result_line(done.stdout + done.stderr)

    def launchers(self) -> list:
        """Lightning's DDP under exec and the drop-in, a Hugging Face Trainer, accelerate."""
        return [*self._lightning(), self._hf_trainer(), self._accelerate()]

    def _lightning(self) -> list:
        results = []
        lightning = [str(FRAMEWORKS / "lightning_ddp.py"), *self.lightning_args]
        dropin = ["torchrun", "--nproc-per-node", "1", "--json", "--run-dir", str(self.out / "runs-l")]
        for name, argv in (
            ("lightning-exec", self._exec("runs-l", self.python, *lightning)),
            ("lightning-dropin", self.mgpu(*dropin, *lightning)),
        ):
            start = time.monotonic()
            done, summary, truth = self._job(name, argv)
            if summary is None or truth is None:
                results.append(
                    Result(name, False, f"exit {done.returncode}, no summary or RESULT; see {name}.log")
                )
                continue
            rank0 = summary["ranks"][0] if summary["ranks"] else {}
            same_loss = rank0.get("loss") is not None and abs(rank0["loss"] - truth["loss"]) <= 1e-6 * max(
                1, abs(truth["loss"])
            )
            ok = (
                done.returncode == 0
                and summary["steps"] == truth["steps"]
                and same_loss
                and summary["device"].startswith("cuda")
            )
            results.append(
                Result(
                    name,
                    ok,
                    f"exit {done.returncode}; {summary['steps']} steps (Lightning's {truth['steps']}), loss "
                    f"{rank0.get('loss')} (Lightning's {truth['loss']}), device {summary['device']}, "
                    f"samples/s {summary['samples_per_s']}, compute {summary.get('compute')}",
                    time.monotonic() - start,
                )
            )
        return results

    def _hf_trainer(self) -> Result:
        start = time.monotonic()
        trainer = self._exec("runs-hf", self.python, str(FRAMEWORKS / "hf_trainer.py"))
        done, summary, truth = self._job("hf-trainer", trainer, env=self.hf_env)
        if summary is None or truth is None:
            return Result("hf-trainer", False, f"exit {done.returncode}; see hf-trainer.log")
        rate, tokens, theirs = (
            summary["samples_per_s"],
            summary["tokens_per_s"],
            truth["samples_per_second"],
        )
        ok = bool(
            done.returncode == 0
            and rate
            and tokens
            and abs(tokens / rate - 16) < 1e-6
            and summary["steps"] == truth["steps"]
        )
        return Result(
            "hf-trainer",
            ok,
            f"exit {done.returncode}; {summary['steps']} steps (the Trainer's {truth['steps']}); "
            f"samples/s {rate} and tokens/s {tokens} (after the warm-up) against its own "
            f"train_samples_per_second {theirs} (its whole train(), start included); device "
            f"{summary['device']}; compute {summary.get('compute')}",
            time.monotonic() - start,
        )

    def _accelerate(self) -> Result:
        start = time.monotonic()
        launch = [self.python, "-m", "accelerate.commands.launch", "--num_processes", "1"]
        done, summary, truth = self._job(
            "accelerate-one", self._exec("runs-acc", *launch, str(FRAMEWORKS / "accelerate_loop.py"))
        )
        if summary is None or truth is None:
            return Result("accelerate-one", False, f"exit {done.returncode}; see accelerate-one.log")
        ok = bool(done.returncode == 0 and summary["steps"] == truth["steps"] and summary["samples_per_s"])
        return Result(
            "accelerate-one",
            ok,
            f"exit {done.returncode}; {summary['steps']} steps (its own {truth['steps']}), samples/s "
            f"{summary['samples_per_s']}, device {summary['device']}",
            time.monotonic() - start,
        )
