"""Planning before running: the transformer shapes (shapes.py) and the memory each rank of each
mode needs for one (memory.py). Pure arithmetic: nothing here imports torch or starts a process."""
