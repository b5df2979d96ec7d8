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
from mgpu_tui.engine.rank.reporter import Reporter


def train(args: argparse.Namespace, reporter: Reporter | None = None) -> torch.nn.Module:
    device = harness.place("single", args)[0]
    model = harness.build_model(args).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    scaler = harness.grad_scaler(args, device)
    task = harness.SyntheticTask(args)

    if reporter:
        reporter.hello(mode="single", device=str(device), device_uuid=harness.device_uuid(device),
                       config=harness.config(args))
    for step in range(1, args.steps + 1):
        harness.maybe_fail(args, step, device=device)
        x, y = task.batch(step, args.batch_size)
        loss = harness.train_step(model, optimizer, scaler, x.to(device), y.to(device), args, device)
        if reporter:
            harness.report_step(reporter, step, len(x), loss, device)
    return model


@record  # on failure, write the traceback where mgpu-tui (and torchrun) look for it
def main() -> None:
    args = harness.parse_args(__doc__.splitlines()[0])
    with Reporter() as reporter:
        model = train(args, reporter)
        harness.save_params(model.state_dict(), args.save_params)
        reporter.done(args.steps)


if __name__ == "__main__":
    main()
