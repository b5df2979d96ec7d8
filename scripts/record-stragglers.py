"""Record the lateness series of real runs for tests/fixtures/stragglers (the straggler rule's tests).

Each run is tests/scripts/gpt_train.py on 2 CPU ranks through `mgpu-tui torchrun`, with a process
burning a core beside it (a busy machine); "clean" runs have no slow rank, "slow" runs have rank 1
sleep --slow-ms in every batch. Kept per run: each rank's flight-recorder dump as the reporter
wrote it (fr/rank<N>.json) and the run's median step time.

    .venv/bin/python scripts/record-stragglers.py clean 10      (KIND COUNT [FIRST INDEX])
    .venv/bin/python scripts/record-stragglers.py slow 4
"""

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from mgpu_tui.engine.protocol.rundir import RunDir

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "tests" / "fixtures" / "stragglers"
CLI = str(Path(sys.executable).with_name("mgpu-tui"))


def record(kind: str, index: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        try:
            extra = ["--slow-rank", "1", "--slow-ms", "50"] if kind == "slow" else []
            done = subprocess.run(
                [
                    CLI,
                    "torchrun",
                    "--nproc-per-node",
                    "2",
                    "--run-dir",
                    f"{tmp}/runs",
                    "--json",
                    "--quiet",
                    str(REPO / "tests/scripts/gpt_train.py"),
                    "--max-iters",
                    "60",
                    "--eval-interval",
                    "1000",
                    "--out-dir",
                    f"{tmp}/out",
                    *extra,
                ],
                capture_output=True,
                text=True,
                timeout=300,
            )
        finally:
            burner.kill()
        summary = json.loads(done.stdout.strip().splitlines()[-1])
        (run,) = Path(tmp, "runs").iterdir()
        if not all(RunDir(run).flight_record_path(rank).exists() for rank in (0, 1)):
            print(f"{kind}-{index}: no flight-recorder dump (a run shorter than one dump period); again")
            return record(kind, index)
        target = OUT / f"{kind}-{index}"
        target.mkdir(parents=True, exist_ok=True)
        for rank in (0, 1):
            record_file = RunDir(run).flight_record_path(rank)
            shutil.copy(record_file, target / record_file.name)
        meta = {
            "step_time_s_median": summary["step_time_s_median"],
            "stragglers": summary["stragglers"],
            "source": "scripts/record-stragglers.py on 2 CPU ranks (2 cores) beside a busy process",
        }
        (target / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
        print(
            target.name, meta["step_time_s_median"], [s["late_s"] for s in summary["stragglers"]], flush=True
        )


if __name__ == "__main__":
    kind, count = sys.argv[1], int(sys.argv[2])
    first = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    for i in range(first, first + count):
        record(kind, i)
