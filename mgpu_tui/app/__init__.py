"""The Textual app. Only this package imports textual; nothing here imports torch."""

from mgpu_tui.app.app import MgpuApp, create_app

__all__ = ["MgpuApp", "create_app"]
