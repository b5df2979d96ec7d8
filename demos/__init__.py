"""One runnable script per parallelism mode, and the harness they share.

Installed as ``mgpu_tui.demos``. The baseline (``single.py``) and what every demo shares sit here;
the modes' scripts sit in two folders by family:

- ``data_parallel/``: every rank runs the whole model on its slice of the batch (dp, ddp, zero1,
  fsdp);
- ``model_parallel/``: the model itself is cut across devices or ranks (mp, ddp_mp, pipeline, tp,
  rpc, hybrid).

Each still runs by its mode's name alone, ``python -m mgpu_tui.demos.single`` or
``python -m torch.distributed.run --standalone --nproc-per-node 2 -m mgpu_tui.demos.ddp`` (the
documented command line): both folders are on this package's search path, below.
"""

from pathlib import Path

FAMILIES = ("data_parallel", "model_parallel")

__path__ = [*__path__, *(str(Path(__path__[0]) / family) for family in FAMILIES)]
