"""Benchmarks of mgpu-tui itself, each printed as a table.

    python bench/run.py                  # every entry
    python bench/run.py overhead --pairs 5
    python bench/run.py reporter help

Entries:

- ``overhead``: the same ddp demo with the same flags under bare torchrun and under
  ``mgpu-tui run``, alternated pair by pair so drifts in the machine hit both
  alike. Both write events (MGPU_RUN_DIR is set for the bare run too), so the
  ranks do the same work and both are measured from the same events. Goals:
  steady-state throughput ratio >= 0.99, launch-to-first-step within 0.2 s of
  bare torchrun, wall time at most 5% more.
- ``transformer``: the same comparison on the transformer workload (``--model gpt-tiny``:
  a 2-block GPT, sequences of 32 tokens), its throughput also in tokens/s. Same goals.
- ``reporter``: the cost of one step event written by the reporter. Goal: < 20 us.
- ``bootstrap``: what the bootstrap's hooks (engine/rank/watch/script_watch.py) add to a training step of
  an unchanged script, in microseconds, on the CPU: the same small DDP loop (one rank, gloo; 4
  micro-batches a step, AdamW) timed bare, then with the hooks in (they cannot be taken out again),
  the step's event written included. Goal: < 200 us a step (a GPU's throughput ratio is the GPU
  issue's to measure).
- ``anatomy``: what taking each step apart (data, forward, backward, communication, optimizer,
  host: engine/rank/watch/step_clock.py) adds to a step, in interleaved pairs (bench/step_costs.py).
  Goal: < 100 us a step.
- ``flops``: what counting a step's FLOPs costs a rank (bench/flop_cost.py says how). Goals: a
  steady step <= 1% slower; the observed step (a new input shape's) once per shape, left out of
  the figures; < 20 us at each forward.
- ``memory-parts``: what taking a rank's memory apart costs (bench/flop_cost.py says how). Goal:
  a steady step <= 1% slower; the saved-tensor hooks on the observed steps alone.
- ``large-job``: the login node's view (the app, opened on the shared folder) of a synthetic job of
  64, 256 and 1,024 ranks, 8 a node, one rank hung and one slow (bench/large_job.py says how).
  Goals at 1,024: under one core and 200 MB, a new step shown at least every 2 s, the hung rank
  called stalled within the stall timeout + 5 s with its node first, the slow rank named.
- ``metrics``: the same synthetic job's Prometheus metrics (``open --metrics-port``'s monitor,
  without the app: the folder followed and its snapshot published after each poll), for 64 and
  1,024 ranks: the exposition's size raw and gzipped, a scrape's time, and the monitor's CPU alone
  and then scraped every second by a process of its own (bench/large_job.py says how). Goal at
  1,024: <= 1 core.
- ``long-run``: a week-long job's memory, run folder and replay: a synthetic job of 8 ranks at
  1,000, 10,000 and 1,000,000 steps, written by the ranks' own writer and followed by a monitor, then
  opened in a real terminal, listed by ``runs`` and read by ``compare --runs``
  (bench/long_run/__init__.py says how). Goals: the monitor's and the app's peak memory within 50 MB
  of the 1,000-step run's, <= 100 MB a rank on disk, the run shown by ``open`` within 2 s.
- ``first-step``: an unchanged script's first step, from launch, under ``mgpu-tui run --script``
  with the bootstrap and with ``--no-instrument``, pairs alternated; the script itself prints when
  its first step ended. Goal: the bootstrap adds <= 0.3 s.
- ``exec-start`` and ``exec-first-step``: what ``mgpu-tui exec`` costs a command's processes
  (bench/start_costs.py says how). Goals: <= 5 ms at start, <= 0.3 s to the first step.
- ``job-costs``: what watching costs a whole job, from outside: users' script shapes (one process
  under ``exec``, 2 DDP ranks under the drop-in, a Hugging Face Trainer step, the GPT demo) bare and
  watched at two lengths, alternated; a step's cost and the fixed cost apart, with the bare runs'
  noise beside them (bench/job_costs.py says how). Goals: a steady step <= 1% of bare's; the fixed
  cost <= 0.5 s for the 2-rank drop-in job.
- ``help``: how long ``mgpu-tui --help`` takes. Goal: < 0.2 s.
- ``telemetry``: the CPU one full sample costs, of 8 GPUs (the NVML stand-in of
  the tests, an HGX H100 box), the host and 16 real processes; and the share of
  a core that sampling at 1 Hz takes. Goals: <= 5 ms a sample, <= 1% of a core.
- ``app``: the app in a real 160x50 terminal (tmux): time to the first frame;
  CPU while idle; how soon ``run ddp --nproc 2 --tui`` shows both ranks' rows with a
  samples/s figure (polled every 0.1 s); and under a flood of 4 ranks x 5,000 log lines a second for
  10 s, how long a key press takes to show, the app's memory, and whether every
  line reached the log files. Goals: first frame <= 0.6 s, idle <= 1% of a core,
  rank rows <= 20 s, key p99 <= 100 ms, memory <= 250 MB, no line lost. The package is byte-compiled
  first, as pip does and as Python does on a first run (this machine sets
  PYTHONDONTWRITEBYTECODE, which would otherwise make every start compile it).
  The first frame and a key's view count as shown when the terminal receives the
  bytes that draw them (tmux pipe-pane, read as they come). Reading the screen back
  instead, by polling capture-pane every 5 ms, costs this 2-core machine half a core
  and so slows what it measures; the key figure measured that way is printed too.
- ``check``: ``mgpu-tui --check --level 1`` and the default level 2, end to end.
  Goals: <= 3 s and <= 20 s on this 2-core machine.
- ``nccl``: ``read_nccl_log`` (what ``mgpu-tui nccl`` and a NCCL run's summary read) over 100 MiB
  of real NCCL_DEBUG=INFO lines repeated as ever new processes. Goal: linear in its input (a
  rank writes these logs: bounded work a line), 100 MiB in < 60 s and < 500 MiB of memory.
- ``memory``: the planner against what the ranks measured: ``run ddp|fsdp --nproc 2 --device cpu``
  on the 21M-parameter custom GPT of docs/compare.md at global batches 8 and 32, the largest
  rank's live tensors at their peak (torch's MemTracker) against the plan's peak, with the
  process's resident set beside. Goal: the plan within 10% of the tensors, and never below.
- ``compare``: ``compare ddp fsdp pipeline``'s wall time against the sum of its
  runs' own durations (launch to exit). Goal: it adds <= 2%.
- ``failures``: how soon a failing ``run ddp --nproc 2`` ends on the CPU: a rank that raises at step
  5, and one that hangs there under ``--stall-timeout 5`` (launch to exit, and the failing rank's
  last step to exit: every rank gone). Goals: <= 15 s and <= 30 s, launch included; the peers gone
  within 5 s of a raise. (The suite's tests of these failures assert what happens, not how soon:
  they run beside other tests' load.)
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable

from app_screen import bench_app
from commands import bench_check, bench_compare, bench_failures, bench_help
from common import clean_env, table
from engine_figures import bench_memory, bench_nccl, bench_telemetry
from flop_cost import bench_flops, bench_memory_parts
from job_costs import bench_job_costs, bench_overhead
from large_job import bench_large_job, bench_metrics
from long_run import bench_long_run
from start_costs import bench_exec_first_step, bench_exec_start, bench_first_step
from step_costs import bench_anatomy, bench_bootstrap, bench_reporter


def _titled(found: tuple[str, list], *headers: str) -> str:
    """A bench that gives its title and rows, as a table under its title."""
    title, rows = found
    return title + "\n" + table(list(headers), rows)


# Each entry, in the order a plain ``python bench/run.py`` runs them: what it prints, given the
# command line's --pairs, --steps and --nproc.
ENTRIES: dict[str, Callable[[argparse.Namespace], str]] = {
    "help": lambda a: bench_help(20),
    "reporter": lambda a: bench_reporter(20_000),
    "bootstrap": lambda a: bench_bootstrap(300),
    "anatomy": lambda a: _titled(
        bench_anatomy(a.pairs or 7, 300, {**clean_env(), "OMP_NUM_THREADS": "1"}), "", "us"
    ),
    "flops": lambda a: _titled(bench_flops(), "", "measured"),
    "memory-parts": lambda a: _titled(bench_memory_parts(), "", "measured"),
    "large-job": lambda a: _titled(bench_large_job(), "", "measured"),
    "metrics": lambda a: _titled(bench_metrics(), "", "measured"),
    "long-run": lambda a: _titled(bench_long_run(), "", "measured"),
    "first-step": lambda a: bench_first_step(a.pairs or 8),
    "exec-start": lambda a: _titled(bench_exec_start(a.pairs or 60), "", "pairs", "median (ms)"),
    "exec-first-step": lambda a: _titled(bench_exec_first_step(a.pairs or 30), "", "pairs", "median (s)"),
    "telemetry": lambda a: bench_telemetry(200, 10.0),
    "app": lambda a: bench_app(10.0),
    "check": lambda a: bench_check(3),
    "compare": lambda a: bench_compare(3, 30),
    "failures": lambda a: bench_failures(a.pairs or 3),
    "nccl": lambda a: bench_nccl(100),
    "memory": lambda a: bench_memory(),
    "overhead": lambda a: bench_overhead(a.pairs or 3, a.steps, a.nproc),
    "job-costs": lambda a: _titled(
        bench_job_costs(a.pairs or 5, tuple(a.shapes.split(","))),
        *("shape", "bare step", "watched: a step", "fixed (start, end)", "rounds"),
    ),
    "transformer": lambda a: bench_overhead(a.pairs or 3, a.steps, a.nproc, model="gpt-tiny"),
}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("entries", nargs="*", choices=(*ENTRIES, []), default=[])
    parser.add_argument(
        "--pairs", type=int, help="overhead: bare/engine pairs (default 3); first-step: pairs (default 8)"
    )
    parser.add_argument("--steps", type=int, default=300, help="overhead: steps per run (default 300)")
    parser.add_argument("--nproc", type=int, default=2, help="overhead: ranks (default 2)")
    parser.add_argument(
        "--shapes", default="exec,drop-in,trainer,gpt-demo", help="job-costs: which shapes (default all four)"
    )
    args = parser.parse_args()
    print(f"mgpu-tui bench on {os.cpu_count()} CPU(s), Python {sys.version.split()[0]}\n", flush=True)
    for entry in args.entries or ENTRIES:
        print(ENTRIES[entry](args), flush=True)
        print(flush=True)


if __name__ == "__main__":
    main()
