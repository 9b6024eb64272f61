"""Errors of a run that the user can act on (printed as one line by the CLI)."""

from grm.base import GrmError


class RunError(GrmError):
    """The run cannot start or continue: bad run directory, too many masked samples, a role that died."""


class RunStopped(RunError):
    """A stop signal (SIGINT, SIGTERM) ended the run; the message says which checkpoint it resumes
    from. The command exits ``128 + signal``, as a shell reports a process a signal ended."""

    def __init__(self, message: str, signum: int) -> None:
        super().__init__(message)
        self.exit_code = 128 + signum
