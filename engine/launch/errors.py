"""Why a launch is refused: a spec that cannot run (SpecError, a usage error) or an environment
that cannot run anything (EnvironmentUnusable)."""

from __future__ import annotations


class SpecError(ValueError):
    """The request is invalid: a usage error."""


class EnvironmentUnusable(RuntimeError):
    """This environment cannot run a mode at all (torch missing, say)."""
