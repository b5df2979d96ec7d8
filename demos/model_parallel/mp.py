"""Model parallel in one process: consecutive blocks on different GPUs.

The model is cut into --stages runs of consecutive layers, stage s on cuda:s.
Activations hop from one GPU to the next in forward, gradients hop back in
backward. It lets a model larger than one GPU train, but only one GPU works at a
time (pipeline parallelism fixes that with micro-batches). Run it:

    python -m mgpu_tui.demos.mp --stages 2 --steps 300
"""

import torch
from torch.distributed.elastic.multiprocessing.errors import record

from mgpu_tui.demos import harness
from mgpu_tui.demos.reporting import Reporting


@record
def main() -> None:
    def mp_args(parser):
        harness.options.add(parser, "stages")

    args = harness.parse_args(__doc__.splitlines()[0], mode_args=mp_args)
    stage_devices = harness.place("mp", args)  # stage s on cuda:s (all "cpu" without CUDA)
    # Placed moves each layer to its stage's device and the activations along with them.
    layers = harness.layer_devices(stage_devices, harness.n_layers(args))
    model = harness.Placed(harness.build_model(args), layers)
    first, last = stage_devices[0], stage_devices[-1]
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    scaler = harness.grad_scaler(args, last)
    task = harness.SyntheticTask(args)

    with Reporting(args, 0, first, task=task) as report:
        report.hello("mp", *stage_devices)
        report.watch_state(model, optimizer)  # checked against the planner's prediction
        for step in range(1, args.steps + 1):
            harness.warm_up(optimizer, args, step)  # this step's learning rate (--warmup-steps)
            x, y = task.batch(step, args.batch_size)
            # Inputs start on the first stage; the labels wait where the output appears.
            x, y = x.to(first), y.to(last)
            optimizer.zero_grad(set_to_none=True)
            step_loss = 0.0
            for mx, my, share, _ in harness.micro_batches(x, y, args.accum):
                with harness.autocast(args, last):
                    loss = harness.loss(model(mx), my) * share  # forward: GPU by GPU, one at a time
                scaler.scale(loss).backward()  # backward: the gradients hop back the same way
                step_loss += loss.detach().float()
            scaler.step(optimizer)
            scaler.update()
            report.step(step, samples=len(x), loss=step_loss)
        harness.save_params(model.state_dict(), args.save_params)
        report.done(args.steps)


if __name__ == "__main__":
    main()
