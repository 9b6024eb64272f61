"""Errors a judge author or user can fix; printed as one line by the CLI."""

from grm.base import GrmError


class JudgeError(GrmError):
    """A problem with a judge spec, template or sample (not a failed judgment: those are data)."""
