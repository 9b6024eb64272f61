"""The error of an eval run, shared by its modules."""

from grm.base import GrmError


class EvalError(GrmError):
    """A user error in an eval run (resume mismatch, incompatible judge and data)."""
