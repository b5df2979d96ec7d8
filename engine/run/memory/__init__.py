"""Where each rank's memory goes, read back from its step events (memory_parts.py)."""
