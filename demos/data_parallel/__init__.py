"""The data-parallel modes' demos: every rank holds (or gathers) the whole model and trains on its
slice of the global batch. Each runs as ``mgpu_tui.demos.MODE`` (see the package's docstring)."""
