"""DDP over model-parallel ranks: each rank's model spans two GPUs.

Rank r places the first half of its layers on cuda:2r and the rest on cuda:2r+1,
then DDP wraps the whole two-GPU model. DDP is told no device_ids, because a
module that spans several devices has no single one; it still all-reduces the
gradients across ranks. Run it:

    python -m torch.distributed.run --standalone --nproc-per-node 2 -m mgpu_tui.demos.ddp_mp
"""

from contextlib import nullcontext

import torch
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel as DDP

from mgpu_tui.demos import harness
from mgpu_tui.demos.reporting import Reporting


@record
def main() -> None:
    args = harness.parse_args(__doc__.splitlines()[0])
    d = harness.start_distributed("ddp_mp", args)  # d.devices: [cuda:2r, cuda:2r+1]
    first, last = d.devices
    local_batch = args.batch_size // d.world

    layers = harness.layer_devices(d.devices, harness.n_layers(args))
    model = harness.Placed(harness.build_model(args), layers)
    ddp_model = DDP(model)  # no device_ids: the module lives on two devices
    optimizer = torch.optim.SGD(ddp_model.parameters(), lr=args.lr, momentum=0.9)
    scaler = harness.grad_scaler(args, last)
    task = harness.SyntheticTask(args)

    with Reporting(args, d.rank, first, task=task) as report:
        report.hello("ddp_mp", first, last)
        report.watch_state(ddp_model, optimizer)  # checked against the planner's prediction
        for step in range(1, args.steps + 1):
            harness.warm_up(optimizer, args, step)  # this step's learning rate (--warmup-steps)
            x, y = task.batch(step, args.batch_size)
            mine = slice(d.rank * local_batch, (d.rank + 1) * local_batch)
            x, y = x[mine].to(first), y[mine].to(last)
            optimizer.zero_grad(set_to_none=True)
            step_loss = 0.0
            for mx, my, share, is_last in harness.micro_batches(x, y, args.accum):
                with nullcontext() if is_last else ddp_model.no_sync():  # all-reduce on the last only
                    with harness.autocast(args, last):
                        loss = harness.loss(ddp_model(mx), my) * share  # across this rank's two GPUs
                    scaler.scale(loss).backward()  # and DDP all-reduces across the ranks
                step_loss += loss.detach().float()
            scaler.step(optimizer)
            scaler.update()
            report.step(step, samples=len(x), loss=step_loss)
        if d.rank == 0:
            harness.save_params(model.state_dict(), args.save_params)
        report.done(args.steps)

    del ddp_model, optimizer
    harness.shutdown_distributed()


if __name__ == "__main__":
    main()
