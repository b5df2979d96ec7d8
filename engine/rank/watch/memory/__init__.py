"""Where a rank's memory goes (docs/your-script.md#where-the-memory-goes): accounting.py (the
parameters, buffers, gradients and optimizer state read from the objects the watch found, each
storage counted once), saved.py (the activations saved for backward on an observed step), creep.py
(a step's loss kept alive with its graph: a leak), failure.py (an out-of-memory: the phase, and
the accounting at that moment)."""
