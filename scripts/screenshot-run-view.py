"""Save docs/run-view.svg: the Run view of a real 2-rank ddp run on this machine's CPU.

    .venv/bin/python scripts/screenshot-run-view.py

The app is driven as the tests drive it (Textual's Pilot, 160x50); the run is real
(torchrun, gloo) and is stopped, with every rank, before the script ends.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path

from mgpu_tui.app import create_app
from mgpu_tui.engine.spec import LaunchSpec

OUT = Path(__file__).resolve().parent.parent / "docs" / "run-view.svg"


async def main() -> None:
    with tempfile.TemporaryDirectory() as runs:
        spec = LaunchSpec("ddp", nproc=2, steps=2000, device="cpu", run_root=Path(runs))
        app = create_app(start=spec, telemetry=[], topology=None)
        async with app.run_test(size=(160, 50)) as pilot:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:  # until the charts have a few hundred steps
                run = app.controller.run
                if run is not None and run.stats().steps >= 400:
                    break
                await pilot.pause(0.5)
            else:
                raise SystemExit("the run did not reach 400 steps in 2 minutes")
            await pilot.pause(0.5)
            app.save_screenshot(OUT.name, str(OUT.parent))
            app.controller.close()  # stop every rank before the app goes
    print(f"saved {OUT}")


if __name__ == "__main__":
    asyncio.run(main())
