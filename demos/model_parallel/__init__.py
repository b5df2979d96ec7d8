"""The model-parallel modes' demos: the model is cut into stages or slices across devices or ranks.
Each runs as ``mgpu_tui.demos.MODE`` (see the package's docstring)."""
