"""Pipeline parallel with torch.distributed.pipelining: one stage per rank, micro-batches in flight.

The model is cut into one run of consecutive layers per rank. The batch is split
into --microbatches pieces that flow through the stages, so while stage 1 works
on micro-batch 0, stage 0 already works on micro-batch 1. GPipe runs every
forward and then every backward; 1F1B alternates them, so fewer activations wait
in memory. Gradients are averaged over the micro-batches, so one step equals the
baseline's step on the whole batch. Run it:

    python -m torch.distributed.run --standalone --nproc-per-node 2 -m mgpu_tui.demos.pipeline --schedule 1f1b
"""

import torch
from torch.distributed.elastic.multiprocessing.errors import record
from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

from mgpu_tui.demos import harness
from mgpu_tui.demos.reporting import Reporting
from mgpu_tui.engine.planning.placement import split_layers


@record
def main() -> None:
    def pipeline_args(parser):
        parser.add_argument("--schedule", choices=("gpipe", "1f1b"), default="gpipe")
        harness.options.add(parser, "microbatches")

    args = harness.parse_args(__doc__.splitlines()[0], mode_args=pipeline_args)
    d = harness.start_distributed("pipeline", args)
    first_stage, last_stage = d.rank == 0, d.rank == d.world - 1

    # This rank's layers, named as in the whole model.
    mine = split_layers(harness.n_layers(args), d.world)[d.rank]
    module = harness.Stage(args, mine.start, mine.stop)
    # Where activations cross between ranks: the GPU, except for ranks sharing one (--share-gpus),
    # whose gloo group cannot send CUDA tensors: they compute on the GPU and hand over in host memory.
    link = torch.device("cpu") if d.shared else d.device
    module = harness.HostBoundary(module, d.device) if d.shared else module.to(d.device)
    stage = PipelineStage(module, d.rank, d.world, link)
    # Every stage steps its own optimizer, but only the last computes (and scales) a loss. With
    # fp16 the stages must share one scale and skip the same steps when any stage's gradients
    # overflow: ShardedGradScaler all-reduces that verdict over the ranks.
    scaler = ShardedGradScaler(d.device.type, enabled=harness.grad_scaler(args, d.device).is_enabled())
    scaler.scale(torch.ones((), device=d.device))  # sets the scale up on stages without a loss

    def loss_fn(output, target):  # runs on the last stage, once per micro-batch
        return scaler.scale(harness.loss(output.to(d.device), target))

    # A pipeline already accumulates over its micro-batches: --accum N means N times as many.
    Schedule = Schedule1F1B if args.schedule == "1f1b" else ScheduleGPipe
    schedule = Schedule(stage, n_microbatches=args.microbatches * args.accum, loss_fn=loss_fn)
    optimizer = torch.optim.SGD(module.parameters(), lr=args.lr, momentum=0.9)
    task = harness.SyntheticTask(args)

    with Reporting(args, d.rank, d.device, task=task) as report:
        report.hello("pipeline", layers=[mine.start, mine.stop])
        # Checked against the planner's prediction. No tensor peak on the CPU: the schedule's
        # backward calls autograd.grad, which torch's MemTracker does not support.
        report.watch_state(module, optimizer, tensor_peak=False)
        # Inside the schedule, what is not a stage's forward or backward waits for the other stages.
        schedule.step = report.timed("comm", schedule.step)
        for step in range(1, args.steps + 1):
            harness.warm_up(optimizer, args, step)  # this step's learning rate (--warmup-steps)
            x, y = task.batch(step, args.batch_size)
            optimizer.zero_grad(set_to_none=True)
            losses = []
            with harness.autocast(args, d.device):
                if first_stage and last_stage:
                    schedule.step(x.to(link), target=y.to(d.device), losses=losses)
                elif first_stage:
                    schedule.step(x.to(link))  # feeds the micro-batches in
                elif last_stage:
                    schedule.step(target=y.to(d.device), losses=losses)  # computes the loss
                else:
                    schedule.step()  # middle stages only pass activations along
            scaler.step(optimizer)
            scaler.update()
            # Only the first stage counts samples (they enter there); only the last has a loss.
            loss = torch.stack(losses).mean() / scaler.get_scale() if losses else None
            report.step(step, samples=len(x) if first_stage else 0, loss=loss)
        harness.save_params(module.state_dict(), args.save_params, d.rank)
        report.done(args.steps)

    del schedule, stage, optimizer
    harness.shutdown_distributed()


if __name__ == "__main__":
    main()
