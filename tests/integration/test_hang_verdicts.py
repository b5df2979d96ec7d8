"""What the ranks' flight recorders tell, for a torchrun script with the reporter's two lines: why a
run hung (real gloo traces of real hung runs; the demo's hang: test_failures.py; an unchanged
script's hang, and the rank the others wait for: test_unchanged_scripts.py)."""

import re
import subprocess
import textwrap

from conftest import CLI, summary_from

SCRIPTS = {
    # Rank 1 stops in plain Python at step 5 (a data loader that never returns, say).
    "stuck_in_python.py": """
        import time
        import torch
        import torch.distributed as dist
        from mgpu_tui.engine.rank.reporter import Reporter

        def load_batch(step):
            if step == 5 and dist.get_rank() == 1:
                time.sleep(3600)
            return torch.ones(4)

        dist.init_process_group("gloo")
        reporter = Reporter()
        for step in range(1, 100):
            dist.all_reduce(load_batch(step))
            reporter.step(step, samples=4)
    """,
    # At step 5 rank 1 broadcasts where rank 0 all-reduces: both wait for ever.
    "mismatched.py": """
        import torch
        import torch.distributed as dist
        from mgpu_tui.engine.rank.reporter import Reporter

        dist.init_process_group("gloo")
        reporter = Reporter()
        t = torch.ones(4)
        for step in range(1, 100):
            if step == 5 and dist.get_rank() == 1:
                dist.broadcast(t, src=1)
            else:
                dist.all_reduce(t)
            reporter.step(step, samples=4)
    """,
}


def test_a_hang_is_explained_by_who_never_entered_which_collective_and_where_it_is(tmp_path):
    launches = {}
    for name, body in SCRIPTS.items():  # at once: each is start-up and a 5 s stall timeout
        (tmp_path / name).write_text(textwrap.dedent(body))
        command = [
            *CLI,
            "run",
            "--script",
            name,
            "--nproc",
            "2",
            "--stall-timeout",
            "5",
            "--on-stall",  # a script's stall is reported and its run goes on by default
            "stop",
            "--run-dir",
            "runs",
            "--json",
            "--quiet",
        ]
        launches[name] = subprocess.Popen(
            command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
    results = {name: (proc.communicate(timeout=120), proc.returncode) for name, proc in launches.items()}

    (out, err), code = results["stuck_in_python.py"]
    assert code == 1, err
    summary = summary_from(out)
    assert re.fullmatch(
        r"rank 1 never entered all_reduce\(float32\[4\]\) #5 \(default group\); rank 0 has "
        r"waited in it for \d+ s; rank 1 is in load_batch at stuck_in_python\.py:9",
        summary.stall.verdict,
    ), summary.stall.verdict
    assert summary.root_cause.rank == 1 and summary.root_cause.message.endswith(summary.stall.verdict)

    (out, err), code = results["mismatched.py"]
    assert code == 1, err
    verdict = summary_from(out).stall.verdict
    assert verdict == "at collective #5 rank 0 called all_reduce(float32[4]) and rank 1 broadcast(float32[4])"
