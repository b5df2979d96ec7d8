"""Code that runs in the child processes (the ranks, the torch probe): the only part of the engine
that imports torch. The parent never imports anything from here but the reporter's names.
"""
