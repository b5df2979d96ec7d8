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
from mgpu_tui.engine.rank.reporter import Reporter


@record
def main() -> None:
    args = harness.parse_args(__doc__.splitlines()[0])
    cpu, gpu = harness.place("hybrid", args)  # ("cpu", "cuda:0"), or both "cpu" without CUDA
    # Layer 0 on the CPU, every other layer on the GPU.
    model = harness.Placed(harness.build_model(args), [cpu] + [gpu] * args.depth)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    scaler = harness.grad_scaler(args, gpu)
    task = harness.SyntheticTask(args)

    with Reporter() as reporter:
        reporter.hello(mode="hybrid", device=f"{cpu},{gpu}", device_uuid=harness.device_uuid(gpu),
                       config=harness.config(args))
        for step in range(1, args.steps + 1):
            harness.maybe_fail(args, step)
            x, y = task.batch(step, args.batch_size)
            loss = harness.train_step(model, optimizer, scaler, x.to(cpu), y.to(gpu), args, gpu)
            harness.report_step(reporter, step, len(x), loss, gpu)
        harness.save_params(model.state_dict(), args.save_params)
        reporter.done(args.steps)


if __name__ == "__main__":
    main()
