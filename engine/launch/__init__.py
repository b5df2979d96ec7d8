"""What to start and how: the launch spec and its checks, the mode catalogue, which devices each
rank uses, the one function that builds the command, and the ranks' CPU priority. Pure: nothing
here starts a process, except the keeper (keeper.py), which is itself the run's first process.
"""
