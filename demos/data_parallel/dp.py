"""nn.DataParallel: one process drives every GPU, splitting each batch between them.

Each forward, DataParallel copies the model to every GPU (replicate), splits the
batch along its first dimension (scatter), runs the copies in threads
(parallel_apply) and collects the outputs on the first GPU (gather); gradients
flow back and sum on the first GPU's parameters. --manual spells those four
steps out. DDP does the same job faster, with one process per GPU. On a machine
without CUDA, DataParallel just calls the model. Run it:

    python -m mgpu_tui.demos.dp --steps 300
"""

import torch
from torch import nn
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import gather, parallel_apply, replicate, scatter

from mgpu_tui.demos import harness
from mgpu_tui.demos.reporting import Reporting


class ManualDataParallel(nn.Module):
    """What nn.DataParallel does in forward, one primitive per line (CUDA only)."""

    def __init__(self, module: nn.Module, device_ids: list[int]) -> None:
        super().__init__()
        self.module, self.device_ids = module, device_ids

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        chunks = scatter(x, self.device_ids)  # 1/N of the batch per GPU
        replicas = replicate(self.module, self.device_ids[: len(chunks)])  # a copy of the model per GPU
        outputs = parallel_apply(replicas, [(c,) for c in chunks])  # one thread per GPU
        return gather(outputs, self.device_ids[0])  # outputs back on GPU 0


@record
def main() -> None:
    def dp_args(parser):
        parser.add_argument("--manual", action="store_true", help="replicate/scatter/apply/gather by hand")

    args = harness.parse_args(__doc__.splitlines()[0], mode_args=dp_args)
    devices = harness.place("dp", args)  # every visible GPU; the first holds the master copy
    model = harness.build_model(args).to(devices[0])
    if devices[0].type == "cuda":
        ids = [d.index for d in devices]
        wrapped = ManualDataParallel(model, ids) if args.manual else nn.DataParallel(model, device_ids=ids)
    elif args.manual:
        raise SystemExit("--manual needs CUDA: scatter, parallel_apply and gather refuse CPU tensors.")
    else:
        wrapped = nn.DataParallel(model)  # no CUDA: it simply calls the model
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    scaler = harness.grad_scaler(args, devices[0])
    task = harness.SyntheticTask(args)

    with Reporting(args, 0, devices[0], task=task) as report:
        report.hello("dp", *devices)
        report.watch_state(model, optimizer)  # checked against the planner's prediction
        for step in range(1, args.steps + 1):
            harness.warm_up(optimizer, args, step)  # this step's learning rate (--warmup-steps)
            x, y = task.batch(step, args.batch_size)
            x, y = x.to(devices[0]), y.to(devices[0])  # the whole batch on the first GPU
            optimizer.zero_grad(set_to_none=True)
            step_loss = 0.0
            for mx, my, share, _ in harness.micro_batches(x, y, args.accum):
                with harness.autocast(args, devices[0]):
                    # Forward: scatter, a replica per GPU in threads, the outputs gathered on GPU 0.
                    loss = harness.loss(wrapped(mx), my) * share
                scaler.scale(loss).backward()  # the replicas' gradients sum into the master copy
                step_loss += loss.detach().float()
            scaler.step(optimizer)
            scaler.update()
            report.step(step, samples=len(x), loss=step_loss)
        harness.save_params(model.state_dict(), args.save_params)
        report.done(args.steps)


if __name__ == "__main__":
    main()
