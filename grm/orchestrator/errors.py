"""Errors of a run that the user can act on (printed as one line by the CLI)."""

from grm.base import GrmError


class RunError(GrmError):
    """The run cannot start or continue: bad run directory, too many masked samples, a role that died."""
