"""Fully sharded data parallel (FSDP2): data parallel, with the model's state split over ranks.

Like DDP, each rank trains on its slice of the batch. Unlike DDP, no rank keeps
the whole model: each holds 1/N of every parameter, gradient and optimizer
state. Before a block runs, its parameters are all-gathered; after backward,
gradients are reduce-scattered so each rank gets the averaged shard it owns.

--no-reshard-after-forward is mode fsdp_grad_op (FSDP1's SHARD_GRAD_OP): gathered
parameters stay whole from a unit's forward to its backward (the whole model at
the peak, as ZeRO-2 holds it), and backward gathers nothing. Run it:

    python -m torch.distributed.run --standalone --nproc-per-node 2 -m mgpu_tui.demos.fsdp
"""

import argparse
from contextlib import contextmanager, nullcontext

import torch
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.elastic.multiprocessing.errors import record
from torch.distributed.fsdp import fully_shard

from mgpu_tui.demos import harness
from mgpu_tui.demos.reporting import Reporting
from mgpu_tui.demos.transformer import GptBlock


@contextmanager
def gradient_sync_off(model):
    """FSDP2's no_sync: accumulate locally; reduce-scatter only on the last micro-batch."""
    model.set_requires_gradient_sync(False)
    try:
        yield
    finally:
        model.set_requires_gradient_sync(True)


@record
def main() -> None:
    def fsdp_args(parser):
        parser.add_argument("--reshard-after-forward", action=argparse.BooleanOptionalAction, default=True)

    args = harness.parse_args(__doc__.splitlines()[0], mode_args=fsdp_args)
    mode = "fsdp" if args.reshard_after_forward else "fsdp_grad_op"
    d = harness.start_distributed(mode, args)
    mesh = init_device_mesh(d.device.type, (d.world,))
    local_batch = args.batch_size // d.world

    model = harness.build_model(args).to(d.device)
    tied = args.shape is not None and args.shape.tied_head
    for layer in model:  # each layer is a unit: gathered just before it runs, freed after
        # (unless --no-reshard-after-forward: then kept until its backward). A head tied to the
        # embeddings shares their matrix: both stay with the root unit, gathered once a step.
        if tied and not isinstance(layer, GptBlock):
            continue
        fully_shard(layer, mesh=mesh, reshard_after_forward=args.reshard_after_forward)
    # --amp is autocast, as in every mode. FSDP's own MixedPrecisionPolicy(param_dtype=...) would
    # gather parameters in 16 bits (half the traffic) but rounds the parameters themselves, not
    # only the matmuls: it trains another function than the baseline (1.8e-2 apart after 40 fp16
    # steps on an H100, against autocast's 1e-4), so --verify could not hold.
    fully_shard(model, mesh=mesh)
    # Only now: the optimizer must see the sharded parameters.
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    scaler = harness.grad_scaler(args, d.device)
    task = harness.SyntheticTask(args)

    with Reporting(args, d.rank, d.device, task=task) as report:
        report.hello(mode)
        report.watch_state(model, optimizer)  # checked against the planner's prediction
        for step in range(1, args.steps + 1):
            harness.warm_up(optimizer, args, step)  # this step's learning rate (--warmup-steps)
            x, y = task.batch(step, args.batch_size)
            mine = slice(d.rank * local_batch, (d.rank + 1) * local_batch)
            x, y = x[mine].to(d.device), y[mine].to(d.device)
            optimizer.zero_grad(set_to_none=True)
            step_loss = 0.0
            for mx, my, share, last in harness.micro_batches(x, y, args.accum):
                with nullcontext() if last else gradient_sync_off(model):  # reduce-scatter on the last only
                    with harness.autocast(args, d.device):
                        # Forward: each block's parameters are all-gathered just before it runs.
                        loss = harness.loss(model(mx), my) * share
                    scaler.scale(loss).backward()  # gathered again, then gradients reduce-scattered
                step_loss += loss.detach().float()
            scaler.step(optimizer)  # each rank updates only the shard it owns
            scaler.update()
            report.step(step, samples=len(x), loss=step_loss)
        harness.save_gathered_params(model, args.save_params, d.rank)  # each rank holds only shards
        report.done(args.steps)

    del model, optimizer
    harness.shutdown_distributed()


if __name__ == "__main__":
    main()
