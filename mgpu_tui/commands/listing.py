"""``mgpu-tui list``: the modes, and whether each can run on this machine."""

from __future__ import annotations

import argparse

from mgpu_tui.console import table
from mgpu_tui.engine.machine import host as host_module
from mgpu_tui.engine.planning.modes import MODES, availability
from mgpu_tui.engine.protocol.folder import dumps as strict_json
from mgpu_tui.errors import ExitCode


def list_command(args: argparse.Namespace) -> int:
    host = host_module.probe()
    modes = [(mode, availability(mode, host)) for mode in MODES.values()]
    if args.json:
        print(
            strict_json(
                {
                    "modes": [
                        {
                            "name": mode.name,
                            "title": mode.title,
                            "launcher": mode.launcher,
                            "devices_per_rank": mode.devices_per_rank,
                            "cpu_path": mode.cpu_path,
                            "teaches": mode.teaches,
                            "choose": mode.choose,
                            "costs": mode.costs,
                            "runnable": here.runnable,
                            "device": here.device,
                            "reason": here.reason,
                        }
                        for mode, here in modes
                    ],
                    "host": {
                        "cpu_count": host.cpu_count,
                        "gpu_count": host.gpu_count,
                        "gpu_note": host.gpu_note,
                        "torch_available": host.torch_available,
                    },
                }
            )
        )
        return ExitCode.OK
    print(f"this machine: {host.cpu_count} CPU(s); {host.gpu_note}\n")
    print(
        table(
            ["mode", "what", "launcher", "here"],
            [
                [mode.name, mode.title, mode.launcher, f"{'yes' if here.runnable else 'no'}: {here.reason}"]
                for mode, here in modes
            ],
        )
    )
    return ExitCode.OK
