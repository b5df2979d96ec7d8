"""The baseline: the whole global batch on one device, in one process.

Every other mode must train exactly this function: same weights, same data,
same global batch (``--verify`` retrains it with ``train`` below and compares).
Run it:

    python -m mgpu_tui.demos.single --steps 300 --device cpu
"""

import argparse

import torch
from torch.distributed.elastic.multiprocessing.errors import record

from mgpu_tui.demos import harness
from mgpu_tui.demos.reporting import Reporting


def train(args: argparse.Namespace, report: Reporting | None = None) -> torch.nn.Module:
    device = harness.place("single", args)[0]
    model = harness.build_model(args).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    scaler = harness.grad_scaler(args, device)  # on only for fp16 on CUDA
    task = harness.SyntheticTask(args)

    if report:
        report.hello("single", device)
        report.watch_state(model, optimizer)  # checked against the planner's prediction
    for step in range(1, args.steps + 1):
        harness.warm_up(optimizer, args, step)  # this step's learning rate (--warmup-steps)
        x, y = task.batch(step, args.batch_size)
        x, y = x.to(device), y.to(device)
        optimizer.zero_grad(set_to_none=True)
        step_loss = 0.0
        for mx, my, share, _ in harness.micro_batches(x, y, args.accum):
            with harness.autocast(args, device):
                loss = harness.loss(model(mx), my) * share  # forward: this micro-batch's part of the loss
            scaler.scale(loss).backward()  # backward: gradients add up over the micro-batches
            step_loss += loss.detach().float()
        scaler.step(optimizer)  # the update (the scaler skips it if fp16 gradients overflowed)
        scaler.update()
        if report:
            report.step(step, samples=len(x), loss=step_loss)
    return model


@record  # on failure, write the traceback where mgpu-tui (and torchrun) look for it
def main() -> None:
    args = harness.parse_args(__doc__.splitlines()[0])
    with Reporting(args) as report:
        model = train(args, report)
        harness.save_params(model.state_dict(), args.save_params)
        report.done(args.steps)


if __name__ == "__main__":
    main()
