"""A root cause says what it means: real failures of distributed training, reproduced on the CPU,
each named with its hint (the signatures without a CPU reproduction: tests/unit/test_root_cause_hints.py)."""

import subprocess
import textwrap

from conftest import CLI, summary_from

SCRIPTS = {
    # NCCL asked for on a machine (and a torch) without CUDA.
    "nccl_on_cpu.py": """
        import torch.distributed as dist
        dist.init_process_group("nccl")
    """,
    # DDP with a parameter that never reaches the loss: the second step finds the first unfinished.
    "unused_parameter.py": """
        import torch
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP

        dist.init_process_group("gloo")
        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.used, self.unused = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)
            def forward(self, x):
                return self.used(x)
        model = DDP(Net())
        for _ in range(3):
            model(torch.ones(2, 4)).sum().backward()
    """,
    # Two ranks calling the same collective with other shapes: gloo notices the sizes differ.
    "mismatched_collective.py": """
        import torch
        import torch.distributed as dist

        dist.init_process_group("gloo")
        dist.all_reduce(torch.ones(4 if dist.get_rank() == 0 else 8))
    """,
    # A DDP script whose training finishes, then aborts in C++ while shutting down, as destroying the
    # process group under a live DDP model does about one run in twenty: made deterministic here
    # with std::terminate and no exception in flight (the runtime's own "terminate called without
    # an active exception", then SIGABRT).
    "abort_at_exit.py": """
        import ctypes
        import gc
        import torch
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP
        from mgpu_tui.engine.rank.reporter import Reporter

        dist.init_process_group("gloo")
        model = DDP(torch.nn.Linear(4, 1))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        reporter = Reporter()
        for step in range(1, 6):
            optimizer.zero_grad()
            loss = model(torch.ones(8, 4)).pow(2).mean()
            loss.backward()
            optimizer.step()
            reporter.step(step, samples=8, loss=loss)
        reporter.done(5)
        reporter.close()
        if dist.get_rank() == 1:
            ctypes.CDLL("libstdc++.so.6")._ZSt9terminatev()
        del model, optimizer  # rank 0 ends as it should: DDP freed before its process group
        gc.collect()
        dist.destroy_process_group()
    """,
}


def test_each_failure_is_named_with_what_it_means(tmp_path):
    launches = {}
    for name, body in SCRIPTS.items():  # at once: each is a few seconds of start-up
        (tmp_path / name).write_text(textwrap.dedent(body))
        launches[name] = subprocess.Popen(
            [*CLI, "run", "--script", name, "--nproc", "2", "--run-dir", "runs", "--json"],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    causes = {}
    for name, proc in launches.items():
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 1, (name, err)
        causes[name] = summary_from(out).root_cause
    assert "use the gloo backend" in causes["nccl_on_cpu.py"].hint
    assert "find_unused_parameters=True" in causes["unused_parameter.py"].hint
    mismatch = causes["mismatched_collective.py"]
    assert "same collectives in the same order" in mismatch.hint, mismatch
    abort = causes["abort_at_exit.py"]
    assert (abort.rank, abort.signal) == (1, "SIGABRT") and "terminate called" in abort.message
    assert abort.hint.startswith("every step had finished before this crash")
