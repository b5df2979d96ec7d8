"""Issue 60: an out-of-memory named. A job under ``resource.setrlimit(RLIMIT_AS)`` (its address
space before training and 1000 MiB more: it needs about 1280) runs out of torch's CPU allocator at
step 1; under ``exec`` that is the root cause, with its phase, the accounting at that moment and
what would fit, labelled as estimates. Each estimate shown, run with the same limit, fits. A job
killed by the kernel's OOM killer in a memory-limited cgroup (made by the test where it can: root,
and a memory controller; skipped, saying why, elsewhere) is named as such."""

import os
import re
import shlex
import subprocess
import sys

import pytest

from conftest import CLI, REPO, results_of, run_exec, summary_from

SCRIPT = str(REPO / "tests" / "scripts" / "memory_train.py")
SHAPE = ["--dim", "256", "--seq", "256", "--vocab", "4096", "--steps", "2"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}  # one thread: an address space that threads do not swell


def test_an_out_of_memory_at_step_1_is_the_root_cause_with_what_filled_it_and_what_would_fit(tmp_path):
    job = [sys.executable, SCRIPT, *SHAPE, "--batch", "64", "--optimizer", "adam", "--limit-mb", "1000"]
    (tmp_path / "oom").mkdir()
    done, _ = run_exec(tmp_path / "oom", *job, env=ENV)
    assert done.returncode == 1, done.stderr[-3000:]
    limit = int(re.search(r"^LIMIT (\d+)$", done.stderr, re.M)[1])
    cause = summary_from(done.stdout).root_cause
    assert cause is not None and cause.rank == 0 and "DefaultCPUAllocator" in cause.message
    oom = cause.out_of_memory
    assert oom is not None and (oom.kind, oom.step) == ("cpu", 1) and oom.phase in ("forward", "backward")
    assert oom.capacity_bytes == limit and oom.request_bytes == 256 << 20
    # the accounting at that moment: the model's parameters and buffers, nothing trained yet
    parameters = (4096 * 256 + 256 * 1024 + 1024 + 1024 * 256 + 256 + 2 * 256 + 4096 * 256) * 4
    assert oom.memory_parts == (parameters, 256 * 4, 0, 0)
    assert f"in the {oom.phase} of step 1" in (cause.hint or "")
    assert "Would fit (estimates" in (cause.hint or "") and oom.would_fit
    for estimate in oom.would_fit:  # each, run with the same limit, fits
        assert estimate.peak_bytes <= limit
        k = int(re.fullmatch(r"micro-batch / (\d+), \d+ accumulation steps", estimate.change)[1])
        again = [a if a != "64" else str(64 // k) for a in job[:-2]]  # the batch over k, the same limit
        (tmp_path / f"fits{k}").mkdir()
        fits, _ = run_exec(
            tmp_path / f"fits{k}", *again, "--limit-bytes", str(limit), "--accum", str(k), env=ENV
        )
        assert fits.returncode == 0, (estimate, fits.stderr[-3000:])
        assert results_of(fits.stdout + fits.stderr)[0]["parameters"] == parameters


def _memory_cgroup(tmp_path, limit: int):
    """A memory cgroup of its own, limited to ``limit`` bytes (v1's memory hierarchy or v2's), or
    why none can be made here (not root, no memory controller)."""
    name = f"mgpu-tui-test-{os.getpid()}-{tmp_path.name}"[:60]
    for root, files in (("/sys/fs/cgroup/memory", ("memory.limit_in_bytes", "memory.memsw.limit_in_bytes")),
                        ("/sys/fs/cgroup", ("memory.max", "memory.swap.max"))):  # fmt: skip
        if not os.path.exists(
            os.path.join(root, files[0] if root.endswith("memory") else "cgroup.controllers")
        ):
            continue
        folder = os.path.join(root, name)
        try:
            os.mkdir(folder)
            for file in files:
                path = os.path.join(folder, file)
                if os.path.exists(path):
                    with open(path, "w") as f:
                        f.write(str(limit) if file != "memory.swap.max" else "0")
        except OSError as exc:
            return None, f"no memory cgroup can be made here ({exc})"
        return folder, None
    return None, "this machine has no memory cgroup controller"


def test_the_kernels_oom_killer_is_named_not_an_unexplained_sigkill(tmp_path):
    folder, why = _memory_cgroup(tmp_path, 700 << 20)
    if folder is None:
        pytest.skip(why)  # said where it cannot be made: the OOM killer's verdict is untested here
    try:
        job = [sys.executable, SCRIPT, *SHAPE, "--batch", "64"]
        runs = tmp_path / "runs"
        inner = shlex.join([*CLI, "exec", "--run-dir", str(runs), "--json", "--", *job])
        shell = f"echo $$ > {shlex.quote(os.path.join(folder, 'cgroup.procs'))} && exec {inner}"
        done = subprocess.run(
            ["sh", "-c", shell], capture_output=True, text=True, timeout=300, env=ENV, cwd=tmp_path
        )
        cause = summary_from(done.stdout).root_cause
        assert cause is not None and cause.signal == "SIGKILL", done.stderr[-3000:]
        assert cause.message.startswith(
            "killed by the kernel's OOM killer (its cgroup's memory limit 700.0 MiB)"
        )
        assert cause.out_of_memory is not None and cause.out_of_memory.kind == "oom killer"
        assert cause.out_of_memory.capacity_bytes == 700 << 20
    finally:
        os.rmdir(folder)
