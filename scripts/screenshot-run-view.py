"""Save an SVG of the Run view during a real 2-rank ddp run (docs/run-view.svg by default).

    .venv/bin/python scripts/screenshot-run-view.py                       # CPU ranks, gloo
    .venv/bin/python scripts/screenshot-run-view.py --device cuda --share-gpus --out docs/gpu-run-view.svg

The app is driven as the tests drive it (Textual's Pilot, 160x50); the run is real
(torchrun) and is stopped, with every rank, before the script ends. On the CPU the
dashboard's telemetry is off (the picture shows the run); with --device cuda it is live.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

from mgpu_tui.app import create_app
from mgpu_tui.engine.launch.spec import LaunchSpec

DEFAULT_OUT = Path(__file__).resolve().parent.parent / "docs" / "run-view.svg"


async def main(args: argparse.Namespace) -> None:
    out = args.out.resolve()
    with tempfile.TemporaryDirectory() as runs:
        spec = LaunchSpec(
            "ddp",
            nproc=2,
            steps=args.total,  # a run with an end: the picture shows its progress and its log lines
            device=args.device,
            run_root=Path(runs),
            share_gpus=args.share_gpus,
        )
        live: dict[str, Any] = {} if args.device == "cuda" else {"telemetry": [], "topology": None}
        app = create_app(start=spec, **live)
        async with app.run_test(size=(160, 50)) as pilot:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:  # until the charts have a few hundred steps
                run = app.jobs.runs.run
                if run is not None and run.stats().steps >= args.steps:
                    break
                await pilot.pause(0.5)
            else:
                raise SystemExit(f"the run did not reach {args.steps} steps in 2 minutes")
            await pilot.pause(1.0)
            app.save_screenshot(out.name, str(out.parent))
            app.jobs.close()  # stop every rank before the app goes
    print(f"saved {out}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--share-gpus", action="store_true", help="two ranks on fewer GPUs (gloo)")
    parser.add_argument("--steps", type=int, default=280, help="take it once the run is this far")
    parser.add_argument("--total", type=int, default=400, help="the run's steps")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    asyncio.run(main(parser.parse_args()))
