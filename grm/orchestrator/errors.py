"""Errors of a run that the user can act on (printed as one line by the CLI)."""


class RunError(Exception):
    """The run cannot start or continue: bad run directory, too many masked samples, unsupported judge."""
