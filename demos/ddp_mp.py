"""DDP over model-parallel ranks: each rank's model spans two GPUs.

Rank r places the first half of its layers on cuda:2r and the rest on cuda:2r+1,
then DDP wraps the whole two-GPU model. DDP is told no device_ids, because a
module that spans several devices has no single one; it still all-reduces the
gradients across ranks. Run it:

    python -m torch.distributed.run --standalone --nproc-per-node 2 -m mgpu_tui.demos.ddp_mp
"""

import torch
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel as DDP

from mgpu_tui.demos import harness
from mgpu_tui.engine.rank.reporter import Reporter


@record
def main() -> None:
    args = harness.parse_args(__doc__.splitlines()[0])
    d = harness.start_distributed("ddp_mp", args)  # d.devices: [cuda:2r, cuda:2r+1]
    first, last = d.devices
    local_batch = args.batch_size // d.world

    model = harness.Placed(harness.build_model(args), harness.layer_devices(d.devices, args.depth + 1))
    ddp_model = DDP(model)  # no device_ids: the module lives on two devices
    optimizer = torch.optim.SGD(ddp_model.parameters(), lr=args.lr, momentum=0.9)
    scaler = harness.grad_scaler(args, last)
    task = harness.SyntheticTask(args)

    with Reporter() as reporter:
        reporter.hello(mode="ddp_mp", device=f"{first},{last}", device_uuid=harness.device_uuid(first),
                       config=harness.config(args))
        for step in range(1, args.steps + 1):
            harness.maybe_fail(args, step, d.rank, d.device)
            x, y = task.batch(step, args.batch_size)
            mine = slice(d.rank * local_batch, (d.rank + 1) * local_batch)
            loss = harness.train_step(ddp_model, optimizer, scaler, x[mine].to(first), y[mine].to(last),
                                      args, last, no_sync=ddp_model.no_sync)
            harness.report_step(reporter, step, local_batch, loss, first)
        if d.rank == 0:
            harness.save_params(model.state_dict(), args.save_params)
        reporter.done(args.steps)

    del ddp_model, optimizer
    harness.shutdown_distributed()


if __name__ == "__main__":
    main()
