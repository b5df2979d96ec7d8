"""What the installed torch offers, printed as one JSON line: run as a child process.

The CLI never imports torch (``--help`` must stay instant), so ``mgpu-tui --check``
asks a child: ``python -m mgpu_tui.engine.rank.torch_probe``. Nothing here starts a
CUDA context beyond counting devices.
"""

from __future__ import annotations

import json
import sys


def _backends(torch) -> tuple[bool, dict[str, bool]]:
    """Which process-group backends the build has, read from its C extension.

    torch.distributed answers the same, but importing that package costs half a
    second more, and ``mgpu-tui --check --level 1`` has three in all.
    """
    if not (hasattr(torch._C, "_c10d_init") or getattr(torch._C, "_has_distributed", lambda: False)()):
        return False, {"gloo": False, "nccl": False, "mpi": False}
    import torch._C._distributed_c10d as c10d

    return True, {name.lower(): hasattr(c10d, f"ProcessGroup{name}") for name in ("Gloo", "NCCL", "MPI")}


def probe() -> dict:
    try:
        import torch
    except Exception as exc:  # noqa: BLE001 (any import failure is the answer)
        return {"torch": None, "error": f"{type(exc).__name__}: {exc}"}
    distributed, backends = _backends(torch)
    cuda_available = torch.cuda.is_available()
    nccl = None
    if backends["nccl"] and cuda_available:
        version = torch.cuda.nccl.version()
        nccl = ".".join(map(str, version)) if isinstance(version, tuple) else str(version)
    return {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,  # the CUDA the build targets; None on a CPU build
        "cuda_available": cuda_available,
        "device_count": torch.cuda.device_count(),
        "nccl": nccl,
        "distributed": distributed,
        "backends": backends,
        "python": sys.version.split()[0],
    }


if __name__ == "__main__":
    print(json.dumps(probe()))
