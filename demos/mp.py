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
from mgpu_tui.engine.rank.reporter import Reporter


@record
def main() -> None:
    def mp_args(parser):
        parser.add_argument("--stages", type=int, default=harness.DEFAULTS.stages,
                            help="GPUs to spread the model over")

    args = harness.parse_args(__doc__.splitlines()[0], mode_args=mp_args)
    stage_devices = harness.place("mp", args)  # stage s on cuda:s (all "cpu" without CUDA)
    # Placed moves each layer to its stage's device and the activations along with them.
    model = harness.Placed(harness.build_model(args), harness.layer_devices(stage_devices, args.depth + 1))
    first, last = stage_devices[0], stage_devices[-1]
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    scaler = harness.grad_scaler(args, last)
    task = harness.SyntheticTask(args)

    with Reporter() as reporter:
        reporter.hello(mode="mp", device=",".join(map(str, stage_devices)),
                       device_uuid=harness.device_uuid(first), config=harness.config(args))
        for step in range(1, args.steps + 1):
            harness.maybe_fail(args, step)
            x, y = task.batch(step, args.batch_size)
            # Inputs start on the first stage; the labels wait where the output appears.
            loss = harness.train_step(model, optimizer, scaler, x.to(first), y.to(last), args, last)
            harness.report_step(reporter, step, len(x), loss, first)
        harness.save_params(model.state_dict(), args.save_params)
        reporter.done(args.steps)


if __name__ == "__main__":
    main()
