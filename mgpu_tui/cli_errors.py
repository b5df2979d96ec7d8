"""The usage error every command raises for bad input: one sentence, exit code 2."""


class UsageError(Exception):
    """Bad input: one sentence for the user, exit code 2."""
