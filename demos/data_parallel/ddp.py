"""DistributedDataParallel: one process per device, each training on its slice of the batch.

Every rank holds a full copy of the model. Each step, a rank computes gradients
on its own 1/N of the global batch; DDP all-reduces (averages) them during
backward, so every copy takes the same optimizer step as the single-device
baseline on the whole batch. Run it:

    python -m torch.distributed.run --standalone --nproc-per-node 2 -m mgpu_tui.demos.ddp --device cpu
"""

from contextlib import nullcontext

import torch
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel as DDP

from mgpu_tui.demos import harness
from mgpu_tui.demos.reporting import Reporting


@record  # on failure, write the traceback where torchrun (and mgpu-tui) look for it
def main() -> None:
    args = harness.parse_args(__doc__.splitlines()[0])
    # torchrun tells each process who it is; rank r uses the GPU of its local rank.
    d = harness.start_distributed("ddp", args)
    local_batch = args.batch_size // d.world

    # Same seed, same initial weights everywhere (DDP also broadcasts rank 0's at wrap time).
    model = harness.build_model(args).to(d.device)
    ddp_model = DDP(model, device_ids=[d.device.index] if d.device.type == "cuda" else None)
    optimizer = torch.optim.SGD(ddp_model.parameters(), lr=args.lr, momentum=0.9)
    scaler = harness.grad_scaler(args, d.device)
    task = harness.SyntheticTask(args)

    with Reporting(args, d.rank, d.device, task=task) as report:
        report.hello("ddp")
        report.watch_state(ddp_model, optimizer)  # checked against the planner's prediction
        for step in range(1, args.steps + 1):
            harness.warm_up(optimizer, args, step)  # this step's learning rate (--warmup-steps)
            x, y = task.batch(step, args.batch_size)
            # This rank's slice of the global batch: rank r takes rows [r*b, (r+1)*b).
            mine = slice(d.rank * local_batch, (d.rank + 1) * local_batch)
            x, y = x[mine].to(d.device), y[mine].to(d.device)
            optimizer.zero_grad(set_to_none=True)
            step_loss = 0.0
            for mx, my, share, last in harness.micro_batches(x, y, args.accum):
                # no_sync: accumulate locally; the gradients are all-reduced once, on the last micro-batch.
                with nullcontext() if last else ddp_model.no_sync():
                    with harness.autocast(args, d.device):
                        loss = harness.loss(ddp_model(mx), my) * share
                    scaler.scale(loss).backward()  # DDP all-reduces gradient buckets as they are ready
                step_loss += loss.detach().float()
            scaler.step(optimizer)  # every rank now holds the same averaged gradients: the same step
            scaler.update()
            report.step(step, samples=len(x), loss=step_loss)
        if d.rank == 0:  # every rank holds the same parameters
            harness.save_params(model.state_dict(), args.save_params)
        report.done(args.steps)

    # Free DDP before the process group: destroying the group under a live DDP
    # module can abort the process at exit.
    del ddp_model, optimizer
    harness.shutdown_distributed()


if __name__ == "__main__":
    main()
