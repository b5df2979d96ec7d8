"""The mgpu-tui engine: launching, events, aggregation and the machine, with no UI.

Installed as ``mgpu_tui.engine``. It never imports textual, and imports torch
nowhere at module level: the app and the CLI import it and must stay light.
"""
