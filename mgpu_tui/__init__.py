"""mgpu-tui: see and compare every PyTorch multi-GPU strategy on your own machine."""

__version__ = "0.1.0"
