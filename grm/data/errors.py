"""``DataError``, the one error class of the data package: every module that reads rows raises it,
so it lives below all of them (in ``sources`` it made ``builtin`` -> ``constraints`` -> ``sources``
a loop)."""

from __future__ import annotations

from grm.base import GrmError


class DataError(GrmError):
    """Bad data: the message names the source and, where it applies, the line (or row) and column."""
