"""Distributed model parallel with torch.distributed.rpc: one trainer, the later blocks remote.

Rank 0 is the trainer: it keeps the first layers and drives training. Every
other rank owns a later run of layers as a RemoteModule, and does nothing but
answer calls. Forward calls each remote part in turn; distributed autograd
records the graph across processes, so one backward reaches every part; the
DistributedOptimizer steps each parameter where it lives. Run it:

    python -m torch.distributed.run --standalone --nproc-per-node 2 -m mgpu_tui.demos.rpc
"""

import os

import torch
import torch.distributed.autograd as dist_autograd
import torch.distributed.rpc as rpc
from torch.distributed.elastic.multiprocessing.errors import record
from torch.distributed.nn import RemoteModule
from torch.distributed.optim import DistributedOptimizer

from mgpu_tui.demos import harness
from mgpu_tui.demos.reporting import Reporting
from mgpu_tui.engine.planning.modes import MODES
from mgpu_tui.engine.planning.placement import rank_devices, split_layers


def rank_device(args, rank: int, world: int, device: torch.device) -> str:
    """Where rank r's layers live: cuda:<r> (round-robin with --share-gpus), or the CPU. One node."""
    if device.type != "cuda":
        return "cpu"
    gpus = torch.cuda.device_count()
    return rank_devices(MODES["rpc"].layout, rank, gpus, nproc=world, share=args.share_gpus)[0]


def train(args, world: int, device: torch.device, report: Reporting) -> None:
    parts = split_layers(harness.n_layers(args), world)
    local = harness.Stage(args, parts[0].start, parts[0].stop).to(device)
    # Rank r builds layers parts[r] itself, on its own device: the same weights as the baseline's.
    remotes = [
        RemoteModule(
            f"worker{r}/{rank_device(args, r, world, device)}", harness.Stage, args=(args, p.start, p.stop)
        )
        for r, p in enumerate(parts)
        if r > 0
    ]
    params = [rpc.RRef(p) for p in local.parameters()]
    for remote in remotes:
        params += remote.remote_parameters()
    # Each worker builds its own SGD from these arguments: its learning rate is out of this
    # loop's reach, so rpc takes no --warmup-steps (main refuses it).
    optimizer = DistributedOptimizer(torch.optim.SGD, params, lr=args.lr, momentum=0.9)
    task = harness.SyntheticTask(args)

    for step in range(1, args.steps + 1):
        x, y = task.batch(step, args.batch_size)
        step_loss = 0.0
        with dist_autograd.context() as context:  # gradients live in the context, not in .grad
            for mx, my, share, _ in harness.micro_batches(x, y, args.accum):
                with harness.autocast(args, device):  # autocast covers the trainer's layers only
                    out = local(mx.to(device))
                for remote in remotes:
                    out = remote(out)  # runs on the remote rank; the result comes back here
                loss = harness.loss(out.float(), my.to(out.device)) * share
                dist_autograd.backward(context, [loss])  # reaches every remote part
                step_loss += loss.item()
            optimizer.step(context)  # each parameter is stepped on the rank where it lives
        report.step(step, samples=len(x), loss=step_loss)

    state = dict(local.state_dict())
    for remote in remotes:  # fetch each remote part's weights to compare with the baseline
        state.update(remote.get_module_rref().to_here().state_dict())
    harness.save_params(state, args.save_params)


@record
def main() -> None:
    args = harness.parse_args(__doc__.splitlines()[0])
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    device = harness.place("rpc", args, int(os.environ["LOCAL_RANK"]), world)[0]
    if args.amp and device.type == "cuda":
        # fp16 needs a GradScaler, which distributed autograd cannot use; bf16 needs none.
        if args.amp_dtype == "fp16":
            raise SystemExit(
                "rpc trains mixed precision in bf16 only: fp16 needs a GradScaler, "
                "which distributed autograd cannot use."
            )
        args.amp_dtype = "bf16"
    if args.warmup_steps:
        raise SystemExit("rpc takes no --warmup-steps: each worker's optimizer keeps its own learning rate.")
    options = rpc.TensorPipeRpcBackendOptions()
    if device.type == "cuda":  # tensors sent to rank r land on its GPU
        for peer in range(world):
            if peer != rank:
                peer_device = torch.device(rank_device(args, peer, world, device))
                options.set_device_map(f"worker{peer}", {device.index: peer_device.index})
    # torchrun's MASTER_ADDR and MASTER_PORT tell RPC where to meet.
    rpc.init_rpc(f"worker{rank}", rank=rank, world_size=world, rpc_backend_options=options)

    with Reporting(args, rank, device) as report:
        report.hello("rpc", device, role="trainer" if rank == 0 else "remote")
        if rank == 0:
            train(args, world, device, report)
        report.done(args.steps if rank == 0 else 0)
        rpc.shutdown()  # waits for every rank: the remotes serve until the trainer is done


if __name__ == "__main__":
    main()
