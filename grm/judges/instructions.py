"""Rule checkers for verifiable instruction constraints (``grm.data.constraints``): one pure
function per constraint type, ``text -> bool``, and the strict verdict over a prompt's list.

They are for evaluation and the upper-bound ``constraints`` verifier; the GRM a policy trains against
never sees them. Definitions (documented so a failure can be read off the text):

- a *word* is a whitespace-separated token with at least one letter or digit (``-`` alone is not one;
  a code fence's ```` ```json ```` is one);
- a *bullet* is a line starting (after indentation) with ``*``, ``-`` or ``•`` and a space;
- *paragraphs* are the non-empty blocks between blank lines;
- *sentences* end at ``.``, ``!`` or ``?`` followed by whitespace, or at a line break; a
  ``<<title>>`` and the ``P.S.`` marker are not counted;
- keywords match whole words, case-insensitively; start and end phrases compare case-insensitively
  after stripping surrounding whitespace (so a lowercase response can still end with them);
- JSON may sit inside one markdown code fence.

Text is NFKC-normalised first, so full-width commas and letters count as their ASCII forms.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Callable
from typing import Any

from grm.data.constraint_cell import read_constraints
from grm.data.constraints import METADATA_KEY, has_word
from grm.data.sources import DataError
from grm.judges.errors import JudgeError


def words(text: str) -> int:
    return sum(1 for w in text.split() if any(ch.isalnum() for ch in w))


def bullets(text: str) -> int:
    return sum(1 for line in text.splitlines() if re.match(r"\s*[*\-•]\s+\S", line) and not _rule_line(line))


def _rule_line(line: str) -> bool:
    """A markdown horizontal rule (``* * *``, ``- - -``) is not a bullet."""
    return re.fullmatch(r"\s*([*\-_])(\s*\1){2,}\s*", line) is not None


def paragraphs(text: str) -> int:
    return sum(1 for block in re.split(r"\n[ \t]*\n", text.strip()) if any(ch.isalnum() for ch in block))


def sentences(text: str) -> int:
    text = re.sub(r"<<[^<>\n]*>>", "\n", text)
    text = re.sub(r"(?im)^\s*p\.\s?s\.", "", text)
    pieces = re.split(r"(?<=[.!?])\s+|\n+", text)
    return sum(1 for p in pieces if any(ch.isalnum() for ch in p))


def json_object(text: str) -> Any:
    """The JSON value the response consists of (one code fence allowed around it), else None."""
    body = text.strip()
    fenced = re.fullmatch(r"```[\w-]*[ \t]*\n?(.*?)\n?[ \t]*```", body, re.S)
    if fenced:
        body = fenced.group(1).strip()
    try:
        return json.loads(body)
    except (ValueError, RecursionError):  # a response nested thousands deep is no answer object either
        return None


def _json_key(text: str, key: str) -> bool:
    value = json_object(text)
    if not isinstance(value, dict) or list(value) != [key]:
        return False
    answer = value[key]
    return answer not in (None, "", [], {}) and not (isinstance(answer, str) and not answer.strip())


CHECKS: dict[str, Callable[[str, dict[str, Any]], bool]] = {
    "lowercase": lambda t, c: t.islower(),  # at least one cased letter, none upper- or titlecase
    "max_words": lambda t, c: words(t) <= c["n"],
    "min_words": lambda t, c: words(t) >= c["n"],
    "bullets": lambda t, c: bullets(t) == c["n"],
    "keyword": lambda t, c: has_word(t, c["word"]),
    "forbidden_word": lambda t, c: not has_word(t, c["word"]),
    "end_phrase": lambda t, c: t.strip().casefold().endswith(c["phrase"].strip().casefold()),
    "start_phrase": lambda t, c: t.strip().casefold().startswith(c["phrase"].strip().casefold()),
    "no_commas": lambda t, c: re.search(r"[,、،]", t) is None,
    "json_key": lambda t, c: _json_key(t, c["key"]),
    "paragraphs": lambda t, c: paragraphs(t) == c["n"],
    "max_sentences": lambda t, c: sentences(t) <= c["n"],
    "title": lambda t, c: re.search(r"<<[^<>\n]*\w[^<>\n]*>>", t) is not None,
    "postscript": lambda t, c: re.search(r"(?im)^\s*p\.\s?s\.\s*\S", t) is not None,
}
"""One checker per constraint type of ``grm.data.constraints.ARGS`` (a unit test keeps them equal)."""


def check_constraint(constraint: dict[str, Any], response: str) -> bool:
    """Does ``response`` satisfy ``constraint`` (a checked ``{"type", ...args}``)? A blank response
    satisfies nothing: "at most N words" is not met by saying nothing."""
    text = unicodedata.normalize("NFKC", response)
    if not text.strip():
        return False
    return CHECKS[constraint["type"]](text, constraint)


def check_all(constraints: list[dict[str, Any]], response: str) -> dict[str, float]:
    """Per constraint type, 1.0 (holds) or 0.0; the prompt is followed strictly iff all are 1.0."""
    return {c["type"]: float(check_constraint(c, response)) for c in constraints}


def verify(sample_constraints: Any, response: str, where: str) -> tuple[float | None, str, dict[str, float] | None]:
    """The ``constraints`` verifier on one sample: (score, explanation, per-type outcomes).

    Strict: 1.0 iff every constraint holds. No constraints (``metadata.constraints`` missing or
    empty) is a failure, None: nothing was verified. A malformed list is a ``JudgeError`` naming
    ``where`` (data rows are checked when they load; this catches hand-written sample files).
    """
    if sample_constraints is None or sample_constraints == []:
        return None, f"no constraints to verify (metadata.{METADATA_KEY} is missing)", None
    try:
        constraints = read_constraints(sample_constraints, f"{where}: metadata.{METADATA_KEY}")
    except DataError as e:
        raise JudgeError(str(e)) from None
    details = check_all(constraints, response)
    failed = [t for t, ok in details.items() if not ok]
    if failed:
        return 0.0, f"fails {len(failed)} of {len(details)} constraints: {', '.join(failed)}", details
    return 1.0, f"all {len(details)} constraints hold", details
