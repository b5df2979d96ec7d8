"""One runnable script per parallelism mode, and the harness they share.

Installed as ``mgpu_tui.demos``; run one with ``python -m mgpu_tui.demos.single``
or ``python -m torch.distributed.run --standalone --nproc-per-node 2 -m mgpu_tui.demos.ddp``.
"""
