"""Runs as records: what the machine did during a run, kept with it (telemetry_log.py), and the
past runs of a folder, listed and read back (history.py)."""
