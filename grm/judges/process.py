"""Process judges (``trajectory.first_faulty_turn``): besides its score, a pointwise judge of an
episode names the first turn that went wrong, so the orchestrator can give that turn (and the ones
after it) less credit than the turns before it.

Each critique's last line of the form ``First faulty turn: N`` (N as the template numbers turns,
``index + 1``; ``Turn N`` and ``=`` accepted) or ``First faulty turn: none`` is read; a number
outside the trajectory's turns, or no such line, reads as nothing (the critique keeps its score).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from typing import Literal

FaultyTurn = int | Literal["none"] | None
"""A turn index (0-based in the trajectory's turns), ``"none"`` (no turn was faulty), None (unread)."""

# One pass over a critique: no nested quantifiers, and the number is at most 6 digits.
_FAULTY = re.compile(r"first\s+faulty\s+turn\s*[:=]\s*(?:turn\s*)?(\d{1,6}|none)\b", re.IGNORECASE)


def read_faulty_turn(text: str, turns: int | None) -> FaultyTurn:
    """The first faulty turn ``text`` names (its last such line), checked against ``turns`` (the
    trajectory's number of turns; None: unchecked, as when rescoring stored records)."""
    found = _FAULTY.findall(text)
    if not found:
        return None
    last = found[-1].lower()
    if last == "none":
        return "none"
    n = int(last)
    if n < 1 or (turns is not None and n > turns):
        return None
    return n - 1


def vote_faulty_turn(named: Sequence[FaultyTurn]) -> FaultyTurn:
    """The turn most critiques name (ties: the earliest turn, ``"none"`` after every turn); None when
    none named anything."""
    counted = Counter(x for x in named if x is not None)
    if not counted:
        return None
    most = max(counted.values())
    tied = [x for x, c in counted.items() if c == most]
    turns = sorted(x for x in tied if isinstance(x, int))
    return turns[0] if turns else "none"
