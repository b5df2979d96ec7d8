"""CPU + GPU hybrid: the first block stays on the CPU, the rest runs on cuda:0.

As in the PyTorch multi-GPU tutorial, a part of the model that does not fit in
GPU memory (a huge embedding table, say) can stay in host memory: its output is
copied to the GPU, and in backward the gradient comes back. Each step pays two
host-device copies; the CPU part is as slow as the CPU. Run it:

    python -m mgpu_tui.demos.hybrid --steps 300
"""

import torch
from torch.distributed.elastic.multiprocessing.errors import record

from mgpu_tui.demos import harness
from mgpu_tui.demos.reporting import Reporting


@record
def main() -> None:
    args = harness.parse_args(__doc__.splitlines()[0])
    cpu, gpu = harness.place("hybrid", args)  # ("cpu", "cuda:0"), or both "cpu" without CUDA
    # Layer 0 on the CPU, every other layer on the GPU.
    model = harness.Placed(harness.build_model(args), [cpu] + [gpu] * (harness.n_layers(args) - 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    scaler = harness.grad_scaler(args, gpu)
    task = harness.SyntheticTask(args)

    with Reporting(args, 0, gpu, task=task) as report:
        report.hello("hybrid", cpu, gpu)
        report.watch_state(model, optimizer)  # checked against the planner's prediction
        for step in range(1, args.steps + 1):
            harness.warm_up(optimizer, args, step)  # this step's learning rate (--warmup-steps)
            x, y = task.batch(step, args.batch_size)
            x, y = x.to(cpu), y.to(gpu)  # the input starts on the CPU part; the labels meet the output
            optimizer.zero_grad(set_to_none=True)
            step_loss = 0.0
            for mx, my, share, _ in harness.micro_batches(x, y, args.accum):
                with harness.autocast(args, gpu):
                    loss = harness.loss(model(mx), my) * share  # forward: CPU layer, copy up, GPU layers
                scaler.scale(loss).backward()  # backward: the gradient is copied back down to the CPU
                step_loss += loss.detach().float()
            scaler.step(optimizer)
            scaler.update()
            report.step(step, samples=len(x), loss=step_loss)
        harness.save_params(model.state_dict(), args.save_params)
        report.done(args.steps)


if __name__ == "__main__":
    main()
