"""Level 1 of ``mgpu-tui --check``: the environment, in seconds, with no rank started.

:func:`gather` reads the machine once (torch's versions through a child process,
since this process never imports torch); :func:`level_one` turns that reading
into checks. The checks are pure functions of the reading, so every failure
path is tested by handing them the reading of a broken machine.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass

from mgpu_tui.engine.checks.results import CheckResult, Status
from mgpu_tui.engine.machine import host as host_module
from mgpu_tui.engine.machine import nvml, topology

PROBE_MODULE = "mgpu_tui.engine.rank.torch_probe"
SHM_LOW_BYTES = 512 * 2**20  # Docker's default is 64 MiB; NCCL wants far more for its buffers
OPEN_FILES_LOW = 4096


@dataclass(frozen=True)
class Environment:
    python: str
    executable: str
    torch: dict  # torch_probe's answer, or {"torch": None, "error": ...}
    torch_seconds: float
    nvml: nvml.NvmlStatus
    visible_gpus: int  # NVML's count after CUDA_VISIBLE_DEVICES
    environ: Mapping[str, str]
    cpu_count: int
    shm_bytes: int | None
    open_files: tuple[int, int]  # soft, hard
    pynvml_distribution: str | None  # the deprecated "pynvml" package's version, if installed
    topology: topology.Topology | None
    topology_error: str | None = None  # NVML answered, then failed while reading the topology


def start_torch_probe(python: str = sys.executable) -> subprocess.Popen:
    """Start the child that imports torch; it takes seconds, so the rest is read meanwhile."""
    return subprocess.Popen(
        [python, "-m", PROBE_MODULE],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish_torch_probe(child: subprocess.Popen, timeout: float = 60) -> dict:
    try:
        out, err = child.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        child.kill()
        child.communicate()
        return {"torch": None, "error": f"importing torch took more than {timeout:g} s"}
    try:
        return json.loads(out.strip().splitlines()[-1])
    except (IndexError, ValueError):
        tail = (err.strip().splitlines() or ["no output"])[-1]
        return {"torch": None, "error": f"the torch probe failed (exit {child.returncode}): {tail}"}


def _distribution_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _shm_bytes() -> int | None:
    try:
        st = os.statvfs("/dev/shm")
    except OSError:
        return None
    return st.f_blocks * st.f_frsize


def gather(
    environ: Mapping[str, str] | None = None, python: str = sys.executable, torch_info: dict | None = None
) -> Environment:
    """Read this machine; ``torch_info``, when given, is the torch probe's answer (no child is
    started): a reading made elsewhere, or the tests' own."""
    environ = dict(os.environ if environ is None else environ)
    start = time.perf_counter()
    child = start_torch_probe(python) if torch_info is None else None
    try:
        status = nvml.status()
        visible = 0
        if status.ok:
            visible = host_module.visible_gpu_count(status.device_count, environ.get("CUDA_VISIBLE_DEVICES"))
        try:
            topo = topology.from_nvml() if status.ok and status.device_count else None
            topo_error = None
        except (nvml.NvmlCallFailed, nvml.GpuLost) as exc:
            topo, topo_error = None, str(exc)
    finally:
        probed = finish_torch_probe(child) if child is not None else torch_info or {}
    return Environment(
        python=sys.version.split()[0],
        executable=python,
        torch=probed,
        torch_seconds=time.perf_counter() - start,
        nvml=status,
        visible_gpus=visible,
        environ=environ,
        cpu_count=host_module.cpu_count(),
        shm_bytes=_shm_bytes(),
        open_files=resource.getrlimit(resource.RLIMIT_NOFILE),
        pynvml_distribution=_distribution_version("pynvml"),
        topology=topo,
        topology_error=topo_error,
    )


# ---- the checks ----------------------------------------------------------------------------


def _r(name: str, status: Status, detail: str, seconds: float = 0.0, **metrics) -> CheckResult:
    return CheckResult(name, status, detail, metrics, seconds)


def check_python(env: Environment) -> CheckResult:
    return _r("python", Status.PASS, f"Python {env.python} ({env.executable})", python_version=env.python)


def check_torch(env: Environment) -> CheckResult:
    t = env.torch
    if not t.get("torch"):
        return _r("torch", Status.FAIL, f"torch cannot be imported: {t.get('error')}", env.torch_seconds)
    build = f"CUDA {t['cuda']} build" if t.get("cuda") else "CPU build"
    return _r(
        "torch",
        Status.PASS,
        f"torch {t['torch']} ({build})",
        env.torch_seconds,
        torch_version=t["torch"],
        cuda_version=t.get("cuda"),
    )


def check_cuda(env: Environment, require_gpus: int) -> CheckResult:
    t = env.torch
    if not t.get("torch"):
        return _r("cuda", Status.SKIP, "needs torch")
    if t["cuda_available"]:
        return _r(
            "cuda",
            Status.PASS,
            f"CUDA {t['cuda']}: torch sees {t['device_count']} GPU(s)",
            cuda_version=t["cuda"],
            device_count=t["device_count"],
        )
    if env.visible_gpus:
        why = "this torch is a CPU build" if not t.get("cuda") else "torch cannot initialise CUDA"
        return _r(
            "cuda",
            Status.FAIL,
            f"NVML sees {env.visible_gpus} GPU(s) but {why} "
            f"(torch {t['torch']}); install a CUDA build of torch",
        )
    if require_gpus:
        return _r("cuda", Status.FAIL, f"--require-gpus {require_gpus}: no GPU here ({env.nvml.detail})")
    return _r("cuda", Status.SKIP, "no GPU here: ranks run on the CPU with gloo")


def check_nccl(env: Environment) -> CheckResult:
    t = env.torch
    if not t.get("torch"):
        return _r("nccl", Status.SKIP, "needs torch")
    if t.get("nccl"):
        return _r("nccl", Status.PASS, f"NCCL {t['nccl']}", nccl_version=t["nccl"])
    if t.get("cuda_available"):
        return _r("nccl", Status.FAIL, "GPUs are visible but this torch has no NCCL: GPU ranks cannot talk")
    return _r("nccl", Status.SKIP, "no GPU: NCCL is not used (gloo carries the CPU ranks)")


def check_backends(env: Environment) -> CheckResult:
    t = env.torch
    if not t.get("torch"):
        return _r("backends", Status.SKIP, "needs torch")
    if not t.get("distributed"):
        return _r("backends", Status.FAIL, "this torch was built without torch.distributed")
    backends = t["backends"]
    listed = ", ".join(f"{name} {'yes' if ok else 'no'}" for name, ok in backends.items())
    if not backends.get("gloo"):
        return _r("backends", Status.FAIL, f"gloo is missing, so CPU ranks cannot run ({listed})", **backends)
    return _r("backends", Status.PASS, listed, **backends)


def check_nvml(env: Environment, require_gpus: int) -> CheckResult:
    s = env.nvml
    if s.ok:
        return _r(
            "nvml",
            Status.PASS,
            f"driver {s.driver_version}, {s.device_count} GPU(s)",
            driver_version=s.driver_version,
            device_count=s.device_count,
        )
    absent = s.state in (
        nvml.NvmlState.LIBRARY_NOT_FOUND,
        nvml.NvmlState.NOT_INSTALLED,
        nvml.NvmlState.DRIVER_NOT_LOADED,
    )
    if absent and not require_gpus:
        return _r("nvml", Status.SKIP, f"{s.state.value}: {s.detail}", state=s.state.value)
    # A mismatch or a refusal means GPUs are there but cannot be watched: that is broken.
    return _r("nvml", Status.FAIL, f"{s.state.value}: {s.detail}", state=s.state.value)


def check_gpu_count(env: Environment, require_gpus: int) -> CheckResult:
    t = env.torch
    cvd = env.environ.get("CUDA_VISIBLE_DEVICES")
    torch_count = t.get("device_count") if t.get("torch") else None
    counts = {"nvml_visible": env.visible_gpus, "torch": torch_count, "cuda_visible_devices": cvd}
    said = (
        f"NVML {env.visible_gpus}, torch {torch_count if torch_count is not None else 'n/a'}, "
        f"CUDA_VISIBLE_DEVICES {cvd if cvd is not None else 'unset'}"
    )
    if torch_count is not None and t.get("cuda_available") and torch_count != env.visible_gpus:
        return CheckResult("gpu_count", Status.FAIL, f"the counts disagree: {said}", counts)
    if env.visible_gpus < require_gpus:
        return CheckResult("gpu_count", Status.FAIL, f"--require-gpus {require_gpus}: {said}", counts)
    if not env.visible_gpus:
        return CheckResult("gpu_count", Status.SKIP, f"no GPU: {said}", counts)
    return CheckResult("gpu_count", Status.PASS, said, counts)


def check_pynvml_package(env: Environment) -> CheckResult:
    if env.pynvml_distribution:
        return _r(
            "pynvml_package",
            Status.WARN,
            f"the deprecated pynvml {env.pynvml_distribution} is installed beside nvidia-ml-py; both "
            "provide `import pynvml` (pip uninstall pynvml)",
            pynvml_version=env.pynvml_distribution,
        )
    version = _distribution_version("nvidia-ml-py")
    detail = f"nvidia-ml-py {version}" if version else "nvidia-ml-py is not installed"
    return _r("pynvml_package", Status.PASS if version else Status.WARN, detail)


def check_topology(env: Environment) -> CheckResult:
    if env.topology_error:
        return _r("topology", Status.FAIL, f"NVML failed while reading the topology: {env.topology_error}")
    if env.topology is None:
        return _r("topology", Status.SKIP, topology.describe(None, env.nvml.detail).rstrip("."))
    return _r(
        "topology",
        Status.PASS,
        topology.describe(env.topology).rstrip("."),
        gpus=len(env.topology.gpus),
        nvswitch=env.topology.nvswitch,
    )


def check_p2p(env: Environment) -> CheckResult:
    topo = env.topology
    if topo is None or len(topo.gpus) < 2 or topo.p2p is None:
        return _r("p2p", Status.SKIP, "needs two GPUs")
    n = len(topo.gpus)
    missing = [(i, j) for i in range(n) for j in range(i + 1, n) if not topo.p2p["read"][i][j]]
    summary = topology.p2p_summary(topo) or "P2P: not read"  # it is: topo.p2p was checked above
    if missing:
        pairs = ", ".join(f"{i}-{j}" for i, j in missing[:6])
        return _r(
            "p2p",
            Status.WARN,
            f"{summary}; no peer reads between {pairs}: copies go through the host",
            pairs_without_p2p=len(missing),
        )
    return _r("p2p", Status.PASS, summary, pairs_without_p2p=0)


def check_shm(env: Environment) -> CheckResult:
    if env.shm_bytes is None:
        return _r("shm", Status.WARN, "/dev/shm is missing: NCCL and DataLoader workers need it")
    size = f"/dev/shm is {env.shm_bytes / 2**20:,.0f} MiB"
    if env.shm_bytes < SHM_LOW_BYTES:
        return _r(
            "shm",
            Status.WARN,
            f"{size}: NCCL may fail with 'unhandled system error'; give the "
            "container more (docker --shm-size=1g or --ipc=host)",
            shm_bytes=env.shm_bytes,
        )
    return _r("shm", Status.PASS, size, shm_bytes=env.shm_bytes)


def check_open_files(env: Environment) -> CheckResult:
    soft, hard = env.open_files
    detail = f"open-file limit {soft} (hard {hard})"
    if 0 <= soft < OPEN_FILES_LOW:
        return _r(
            "open_files",
            Status.WARN,
            f"{detail}: ranks with DataLoader workers can run out (ulimit -n {hard if hard > 0 else 65536})",
            soft=soft,
            hard=hard,
        )
    return _r("open_files", Status.PASS, detail, soft=soft, hard=hard)


def check_env_vars(env: Environment) -> CheckResult:
    stray = {k: v for k, v in env.environ.items() if k.startswith("PET_")}
    tuning = {k: v for k, v in env.environ.items() if k.startswith(("NCCL_", "TORCH_"))}
    listed = ", ".join(f"{k}={v}" for k, v in sorted({**stray, **tuning}.items()))
    names = sorted({**stray, **tuning})
    if stray:
        return _r(
            "env_vars",
            Status.WARN,
            f"torchrun reads PET_* as its flags' defaults: {listed} "
            "(mgpu-tui removes them from its own launches)",
            set=names,
        )
    if tuning:
        return _r("env_vars", Status.PASS, f"set: {listed}", set=names)
    return _r("env_vars", Status.PASS, "no PET_*, NCCL_* or TORCH_* variable set", set=[])


def check_omp_threads(env: Environment) -> CheckResult:
    value = env.environ.get("OMP_NUM_THREADS")
    if value is None:
        return _r(
            "omp_num_threads",
            Status.PASS,
            f"unset: mgpu-tui gives each rank its share of the "
            f"{env.cpu_count} cores (torchrun alone would set 1)",
            cpu_count=env.cpu_count,
        )
    if not value.strip().isdigit() or int(value) < 1:
        return _r(
            "omp_num_threads",
            Status.FAIL,
            f"OMP_NUM_THREADS must be a whole number of at least 1, got {value!r}",
        )
    threads = int(value)
    if threads > env.cpu_count:
        return _r(
            "omp_num_threads",
            Status.WARN,
            f"OMP_NUM_THREADS={threads} is more than the "
            f"{env.cpu_count} cores here: every rank will fight for them",
            threads=threads,
        )
    return _r("omp_num_threads", Status.PASS, f"OMP_NUM_THREADS={threads}", threads=threads)


def level_one(env: Environment, require_gpus: int = 0) -> list[CheckResult]:
    return [
        check_python(env),
        check_torch(env),
        check_cuda(env, require_gpus),
        check_nccl(env),
        check_backends(env),
        check_nvml(env, require_gpus),
        check_gpu_count(env, require_gpus),
        check_pynvml_package(env),
        check_topology(env),
        check_p2p(env),
        check_shm(env),
        check_open_files(env),
        check_env_vars(env),
        check_omp_threads(env),
    ]
