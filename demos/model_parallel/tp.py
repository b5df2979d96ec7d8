"""Tensor parallel: every block's matrices split over the ranks, in the Megatron pattern.

Each block says how (its ``tp_plan``): the MLP block's fc1 is split by columns (each rank
computes some of the hidden units) and fc2 by rows (each rank multiplies its hidden units by its
slice of fc2); one all-reduce sums the partial outputs. A GPT block splits Q, K and V by columns
(each rank keeps whole heads) and the attention's output projection by rows, then its MLP the
same way: two all-reduces a block. Every rank sees the same batch, so throughput counts its
samples once (rank 0 reports them). The rest (the head, embeddings, norms) stays whole on every
rank. Run it:

    python -m torch.distributed.run --standalone --nproc-per-node 2 -m mgpu_tui.demos.tp --model gpt-tiny
"""

import torch
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.elastic.multiprocessing.errors import record
from torch.distributed.tensor import DTensor, Replicate, distribute_module
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

from mgpu_tui.demos import harness
from mgpu_tui.demos.reporting import Reporting

STYLES = {"colwise": ColwiseParallel, "rowwise": RowwiseParallel}


def tensor_parallel(model: torch.nn.Sequential, mesh) -> torch.nn.Sequential:
    """Split every block over the mesh's ranks as its tp_plan says, in place; the rest stays whole."""
    for layer in model:
        plan = getattr(layer, "tp_plan", {})
        if plan:
            parallelize_module(layer, mesh, {name: STYLES[style]() for name, style in plan.items()})
        split = {layer.get_submodule(name) for name in plan}
        # What is not split stays whole on every rank, but as replicated DTensors: the fused (foreach)
        # optimizer and GradScaler on CUDA refuse a mix of DTensors and plain tensors. Their inputs and
        # outputs stay plain tensors, so they cost no communication.
        for module in layer.modules():
            own = next(module.parameters(recurse=False), None) is not None
            if own and module not in split and not any(True for _ in module.children()):
                distribute_module(module, mesh, input_fn=_replicated_input, output_fn=_local_output)
    return model


def _replicated_input(module, inputs, mesh):
    return tuple(DTensor.from_local(x, mesh, [Replicate()]) for x in inputs)  # no communication


def _local_output(module, output, mesh):
    return output.to_local()


@record
def main() -> None:
    args = harness.parse_args(__doc__.splitlines()[0])
    d = harness.start_distributed("tp", args)
    mesh = init_device_mesh(d.device.type, (d.world,))

    model = tensor_parallel(harness.build_model(args).to(d.device), mesh)
    if args.shape is not None and args.shape.tied_head:  # each module got its own copy: tie them again
        model[-1].out.weight = model[0].tokens.weight
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    scaler = harness.grad_scaler(args, d.device)
    task = harness.SyntheticTask(args)

    with Reporting(args, d.rank, d.device, task=task) as report:
        report.hello("tp")
        report.watch_state(model, optimizer)  # checked against the planner's prediction
        for step in range(1, args.steps + 1):
            harness.warm_up(optimizer, args, step)  # this step's learning rate (--warmup-steps)
            x, y = task.batch(step, args.batch_size)  # the same whole batch on every rank
            x, y = x.to(d.device), y.to(d.device)
            optimizer.zero_grad(set_to_none=True)
            step_loss = 0.0
            for mx, my, share, _ in harness.micro_batches(x, y, args.accum):
                with harness.autocast(args, d.device):
                    # Forward: each block computes its share of the hidden units, then one all-reduce.
                    loss = harness.loss(model(mx), my) * share
                scaler.scale(loss).backward()  # backward: the mirror image, one all-reduce per block
                step_loss += loss.detach().float()
            scaler.step(optimizer)  # each rank updates its own slices of the matrices
            scaler.update()
            report.step(step, samples=len(x) if d.rank == 0 else 0, loss=step_loss)  # samples counted once
        harness.save_gathered_params(model, args.save_params, d.rank)  # fc1/fc2 are sharded DTensors
        report.done(args.steps)

    del model, optimizer
    harness.shutdown_distributed()


if __name__ == "__main__":
    main()
