"""Regular expressions written by users (a regex parser's ``pattern``, a ``regex-format`` rule's):
checked when the spec loads, and matched with a time limit.

They run on text grm does not control: a judge's critique, and a policy's response for a rule
verifier (written under optimisation pressure). A backtracking engine can take exponential time on
some patterns; one such match would hang a judge call, ``grm judge lint`` or ``grm eval``. So:

- *at load*: a pattern must compile in both Python's ``re`` (the syntax the docs promise) and the
  ``regex`` engine that runs it, and is refused when it has the shape that backtracks
  catastrophically (``backtracking_risk``: a repeated group that can match the same text in more
  than one way, ``(a+)+``, ``(\\w+\\s?)*``, ``(.*,)*``), with a message saying how to rewrite it;
- *at match time*: every match runs in ``regex`` with ``timeout=`` (``REGEX_TIMEOUT_S`` unless the
  judge's ``limits.regex_timeout_s`` says otherwise). A timeout is a failed parse, counted and masked
  like any other, never a hang. ``regex`` also remembers failed positions, so most patterns the
  shape test lets through stay polynomial; ``(a|aa)+$`` on 60 ``a``s still takes seconds and is what
  the timeout is for.

Measured on the 2-core reference machine: ``(x+x+)+y``, ``(\\w+\\s?)*$``, ``(\\d+)*$`` and
``(a+b?)+$`` each ran past 2 s on 20,000 characters in ``regex``; the shipped score patterns parse
a 20,000-character critique in 5 ms.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any

import regex

REGEX_TIMEOUT_S = 1.0
"""Seconds one user regex may spend on one text (a parse, a format check)."""

try:  # the stdlib's own parser of a pattern: private, so only the shape check below relies on it
    from re import _parser as _sre  # type: ignore[attr-defined]  # Python 3.11+
except ImportError:  # pragma: no cover - Python 3.10
    import sre_parse as _sre  # type: ignore[no-redef]

_UNBOUNDED = 16
"""A repeat allowing this many or more iterations counts as unbounded for the shape check."""
_PROBE = "".join(chr(c) for c in range(32, 127)) + "\t\n\r\x0b\x0c\xa0\u2028éßЖ中٣\U0001d7d8"
"""Characters that stand for all of them when the check asks whether two parts can match one."""


def compile_user_regex(pattern: str, flags: int = 0) -> regex.Pattern[str]:
    """``pattern`` compiled for matching with a timeout; ValueError says why it cannot be used."""
    try:
        re.compile(pattern, flags)
    except re.error as e:
        raise ValueError(f"not a valid regular expression: {e}") from None
    except RecursionError:
        raise ValueError("the regular expression nests too deeply") from None
    try:
        compiled = regex.compile(pattern, flags)
    except (regex.error, RecursionError) as e:  # re syntax that the regex engine reads otherwise
        raise ValueError(f"not a regular expression grm can run: {e}") from None
    risk = backtracking_risk(pattern, flags)
    if risk is not None:
        raise ValueError(risk)
    return compiled


def backtracking_risk(pattern: str, flags: int = 0) -> str | None:
    """Why ``pattern`` can backtrack catastrophically, or None when its shape is not known to.

    The shape: a group repeated without bound whose body holds another unbounded repeat, where
    everything else the body must match can also be matched by that inner repeat. Then a run of
    such characters splits among the iterations in exponentially many ways, all tried before a
    match fails. ``(\\d+,)*`` is fine (the comma ends each iteration); ``(\\d+,?)*`` is not.
    Possessive repeats and atomic groups never backtrack into themselves and are skipped.
    """
    try:
        tree = _sre.parse(pattern, flags)
    except Exception:  # the compile above already refused invalid patterns; nothing to add
        return None
    ignore_case = bool(tree.state.flags & re.IGNORECASE)
    try:
        risky = _nested_repeat(list(tree), ignore_case)
    except RecursionError:
        return "the regular expression nests too deeply"
    if not risky:
        return None
    return (
        "it can backtrack exponentially: it repeats a group whose body can match the same text in "
        "more than one way (a nested repeat such as '(a+)+' or '(\\w+\\s?)*'), and a failing match "
        "tries every way; make each iteration end in something the inner repeat cannot match ('(\\w+\\s)*'), "
        "or use a possessive repeat ('++', '*+') or an atomic group '(?>...)'"
    )


# ---------------------------------------------------------------------------- the shape check


def _name(op: Any) -> str:
    return str(op)


def _repeat(op: Any, av: Any) -> tuple[int, int, list[Any]] | None:
    """(min, max, body) of a backtracking repeat, else None."""
    if _name(op) in ("MAX_REPEAT", "MIN_REPEAT"):
        return av[0], av[1], list(av[2])
    return None


def _children(op: Any, av: Any) -> list[list[Any]]:
    """Sub-sequences a node contains that a backtracking search may re-enter."""
    name = _name(op)
    if name == "SUBPATTERN":
        return [list(av[-1])]
    if name == "BRANCH":
        return [list(b) for b in av[1]]
    if name in ("MAX_REPEAT", "MIN_REPEAT"):
        return [list(av[2])]
    if name == "GROUPREF_EXISTS":
        return [list(b) for b in av[1:] if b is not None]
    return []  # possessive repeats, atomic groups, lookarounds: no backtracking into them


def _nested_repeat(seq: list[Any], ignore_case: bool) -> bool:
    for op, av in seq:
        rep = _repeat(op, av)
        if rep is not None and rep[1] >= _UNBOUNDED and _ambiguous(rep[2], ignore_case):
            return True
        if any(_nested_repeat(child, ignore_case) for child in _children(op, av)):
            return True
    return False


def _inner_repeats(seq: list[Any]) -> list[Any]:
    """Unbounded repeats anywhere inside ``seq`` (not inside a possessive or atomic part)."""
    out = []
    for node in seq:
        rep = _repeat(*node)
        if rep is not None and rep[1] >= _UNBOUNDED:
            out.append(node)
        for child in _children(*node):
            out.extend(_inner_repeats(child))
    return out


def _ambiguous(body: list[Any], ignore_case: bool) -> bool:
    for inner in _inner_repeats(body):
        chars = _chars([inner], ignore_case)
        if chars and all(other & chars for other in _required(body, inner, ignore_case)):
            return True
    return False


def _required(seq: list[Any], inner: Any, ignore_case: bool) -> list[frozenset[str]]:
    """The characters each part of ``seq`` must match, apart from ``inner`` and optional parts,
    descending into the groups that hold ``inner``."""
    out: list[frozenset[str]] = []
    for node in seq:
        op, av = node
        name = _name(op)
        if node is inner or name in ("AT", "ASSERT", "ASSERT_NOT"):
            continue  # zero-width, or the repeat being checked
        rep = _repeat(op, av)
        if rep is not None and rep[0] == 0:
            continue
        holders = [c for c in _children(op, av) if any(n is inner for n in _walk(c))]
        if holders and name != "BRANCH":
            out.extend(_required(holders[0], inner, ignore_case))
        else:
            out.append(_chars([node], ignore_case))
    return out


def _walk(seq: list[Any]) -> list[Any]:
    nodes = []
    for node in seq:
        nodes.append(node)
        for child in _children(*node):
            nodes.extend(_walk(child))
    return nodes


def _chars(seq: list[Any], ignore_case: bool) -> frozenset[str]:
    """Probe characters any single-character part of ``seq`` can match (a back-reference: all)."""
    out: set[str] = set()
    for op, av in seq:
        name = _name(op)
        if name == "LITERAL":
            out.add(chr(av))
        elif name == "NOT_LITERAL":
            out.update(c for c in _PROBE if c != chr(av))
        elif name in ("ANY", "GROUPREF"):
            out.update(_PROBE)
        elif name == "IN":
            out.update(c for c in _PROBE if _in_class(av, c))
        elif name == "ATOMIC_GROUP":
            out.update(_chars(list(av), ignore_case))
        elif name == "POSSESSIVE_REPEAT":
            out.update(_chars(list(av[2]), ignore_case))
        elif name not in ("ASSERT", "ASSERT_NOT"):  # zero-width
            for child in _children(op, av):
                out.update(_chars(child, ignore_case))
    if ignore_case:
        out.update({c.swapcase() for c in out})
    return frozenset(out)


_CATEGORIES = {
    "CATEGORY_DIGIT": lambda c: unicodedata.category(c) == "Nd",
    "CATEGORY_SPACE": str.isspace,
    "CATEGORY_WORD": lambda c: c.isalnum() or c == "_",
}


def _in_class(items: list[Any], c: str) -> bool:
    negate, hit = False, False
    for op, av in items:
        name = _name(op)
        if name == "NEGATE":
            negate = True
        elif name == "LITERAL":
            hit |= c == chr(av)
        elif name == "RANGE":
            hit |= av[0] <= ord(c) <= av[1]
        elif name == "CATEGORY":
            cat = _name(av)
            test = _CATEGORIES.get(cat.replace("NOT_", "").replace("UNI_", "").replace("LOC_", ""))
            if test is not None:
                hit |= test(c) != ("NOT_" in cat)
            else:
                hit = True  # a category this check does not know: assume it overlaps
    return hit != negate
