"""ZeRO-1: DistributedDataParallel with the optimizer state sharded (ZeroRedundancyOptimizer).

Training is DDP's: each rank computes gradients on its 1/N of the global batch and
DDP all-reduces them. The optimizer is what changes: each rank keeps the optimizer
state (SGD's momentum here, Adam's two buffers in most jobs) of its share of the
parameters only, steps that share, then broadcasts it, so every rank again holds
the same whole model. Run it:

    python -m torch.distributed.run --standalone --nproc-per-node 2 -m mgpu_tui.demos.zero1 --device cpu
"""

from contextlib import nullcontext

import torch
from torch.distributed.elastic.multiprocessing.errors import record
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP

from mgpu_tui.demos import harness
from mgpu_tui.demos.reporting import Reporting


@record
def main() -> None:
    args = harness.parse_args(__doc__.splitlines()[0])
    d = harness.start_distributed("zero1", args)
    local_batch = args.batch_size // d.world

    model = harness.build_model(args).to(d.device)
    ddp_model = DDP(model, device_ids=[d.device.index] if d.device.type == "cuda" else None)
    # The parameters are dealt out whole, largest first, each to the rank with the fewest so far;
    # a rank's optimizer keeps state only for its own.
    optimizer = ZeroRedundancyOptimizer(
        ddp_model.parameters(), optimizer_class=torch.optim.SGD, lr=args.lr, momentum=0.9
    )
    scaler = harness.grad_scaler(args, d.device)
    task = harness.SyntheticTask(args)

    with Reporting(args, d.rank, d.device, task=task) as report:
        report.hello("zero1")
        # The state this rank holds: the whole model and its gradients, its share of the optimizer's.
        report.watch_state(ddp_model, optimizer.optim)
        for step in range(1, args.steps + 1):
            harness.warm_up(optimizer, args, step)
            x, y = task.batch(step, args.batch_size)
            mine = slice(d.rank * local_batch, (d.rank + 1) * local_batch)
            x, y = x[mine].to(d.device), y[mine].to(d.device)
            optimizer.zero_grad(set_to_none=True)
            step_loss = 0.0
            for mx, my, share, last in harness.micro_batches(x, y, args.accum):
                with nullcontext() if last else ddp_model.no_sync():
                    with harness.autocast(args, d.device):
                        loss = harness.loss(ddp_model(mx), my) * share
                    scaler.scale(loss).backward()  # gradients all-reduced, as in DDP
                step_loss += loss.detach().float()
            # Each rank steps its share of the parameters, then broadcasts it to the others.
            scaler.step(optimizer)
            scaler.update()
            report.step(step, samples=len(x), loss=step_loss)
        if d.rank == 0:  # after the broadcasts every rank holds the same parameters
            harness.save_params(model.state_dict(), args.save_params)
        report.done(args.steps)

    del ddp_model, optimizer
    harness.shutdown_distributed()


if __name__ == "__main__":
    main()
