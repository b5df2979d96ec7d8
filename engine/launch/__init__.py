"""What to start and how: the launch options (each flag declared once, options.py), the launch spec
and its checks (spec.py; errors.py: why a launch is refused), where the ranks go (devices.py), the
one function that builds the command (command.py), the process tree and its keeper (processes.py,
keeper.py), the ranks' CPU priority (priority.py) and a Slurm job's facts (slurm.py). Pure: nothing
here starts a process, except the keeper, which is itself the run's first process.
"""
