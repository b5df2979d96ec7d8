"""Runs read back from their folders: the past runs of a folder, listed and read back
(history.py); one run replayed or followed live from its folder alone (follow.py); and its recorded
telemetry as series, with a node's host as its own file last said it (telemetry_read.py)."""
