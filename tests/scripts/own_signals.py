"""A training script that owns its signals and descriptors, as long jobs do. It knows nothing of
mgpu-tui, and must run under it exactly as bare:

- rank 0 installs a SIGUSR2 handler that checkpoints and leaves (Slurm's --signal=USR2 preemption
  shape), rank 1 resets SIGUSR2 to its default action (which ends the process);
- --close-descriptors: it first closes every descriptor it inherited (os.closerange(3, 4096)) and
  opens its own metrics file, which must then hold its own lines only;
- both ranks pause for --pause seconds at step 10 (a long checkpoint), then go on to step 20.
Each rank prints RESULT {"rank": r, "steps": 20, "left_early": false, "metrics_lines": 20}.
"""

import argparse
import json
import os
import signal
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("--pause", type=float, default=6.0)
parser.add_argument("--close-descriptors", action="store_true")
args = parser.parse_args()
if args.close_descriptors:
    os.closerange(3, 4096)
metrics_path = os.path.join(os.environ.get("METRICS_DIR", "."), f"metrics{os.environ['RANK']}.jsonl")
metrics = open(metrics_path, "w", buffering=1)

import torch  # noqa: E402 (after the descriptors are its own, as such scripts do)
import torch.distributed as dist  # noqa: E402

dist.init_process_group("gloo")
rank = dist.get_rank()
left_early = False


def preempted(signum, frame):
    metrics.write(json.dumps({"preempted": True}) + "\n")
    sys.stdout.write(f"RESULT {json.dumps({'rank': rank, 'steps': step, 'left_early': True})}\n")
    sys.stdout.flush()
    os._exit(0)


signal.signal(signal.SIGUSR2, preempted if rank == 0 else signal.SIG_DFL)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(1, 21):
    loss = model(torch.randn(4, 8)).pow(2).mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    metrics.write(json.dumps({"step": step, "loss": round(loss.item(), 6)}) + "\n")
    if step == 10:
        time.sleep(args.pause)
metrics.close()
with open(metrics_path) as f:
    lines = f.read().splitlines()
own = all(set(json.loads(line)) <= {"step", "loss", "preempted"} for line in lines)
result = {"rank": rank, "steps": step, "left_early": left_early, "metrics_lines": len(lines), "own": own}
sys.stdout.write(f"RESULT {json.dumps(result)}\n")
sys.stdout.flush()
dist.destroy_process_group()
