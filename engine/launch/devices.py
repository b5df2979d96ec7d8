"""Where a run's ranks go on this host: the device (--device auto, cpu, cuda), how many ranks when
--nproc is not given, and whether its GPUs suffice or must be shared."""

from __future__ import annotations

from typing import Literal

from mgpu_tui.engine.launch.errors import SpecError
from mgpu_tui.engine.launch.options import DEVICES
from mgpu_tui.engine.machine.host import Host
from mgpu_tui.engine.planning.defaults import DEFAULTS
from mgpu_tui.engine.planning.modes import Mode


def choose_device(requested: str, host: Host, share_gpus: bool = False) -> Literal["cpu", "cuda"]:
    """--device on this host: ``auto`` is CUDA where there is a GPU torch can use, else the CPU."""
    if requested not in DEVICES:
        raise SpecError(f"--device must be one of {', '.join(DEVICES)}, got {requested!r}.")
    cuda = host.has_cuda if requested == "auto" else requested == "cuda"
    if cuda and not host.has_cuda:
        raise SpecError(f"--device cuda needs an NVIDIA GPU, but there is none here ({host.gpu_note}).")
    if share_gpus and not cuda:
        raise SpecError("--share-gpus is for CUDA ranks; on the CPU every rank shares it already.")
    return "cuda" if cuda else "cpu"


def default_nproc(mode: Mode, device: str, host: Host) -> int:
    """Ranks when --nproc is not given: one per GPU (or pair, for ddp_mp) on CUDA; a few on the CPU."""
    if not mode.multi_process:
        return 1
    nproc = max(1, host.gpu_count // mode.devices_per_rank) if device == "cuda" else DEFAULTS.cpu_ranks
    return max(nproc, mode.min_nproc)


def check_gpus(what: str, needed: int, host: Host, share_gpus: bool) -> bool:
    """Refuse ``what`` if it needs more GPUs than are visible, unless they may be shared;
    whether ranks will share GPUs."""
    if needed <= host.gpu_count:
        return False
    if not share_gpus:
        raise SpecError(
            f"{what} needs {needed} GPUs, but {host.gpu_count} are visible "
            "(--share-gpus lets ranks share them)."
        )
    return True
