"""Text a config holds is valid Unicode: no lone surrogate, which no UTF-8 file, prompt, log line
or spec hash can carry. JSON's and YAML's ``"\\ud800"`` escapes make one, and so does a
command-line byte that is not UTF-8 (Python hands ``\\xff`` over as ``"\\udcff"``).

``grm.config.loading.validate`` walks the data of a file and its overrides before the models see
it, to name the key path; every config model (``grm.config.base.Strict``) checks its fields too,
whichever way the data came (a recorded spec read back, an argument made into a spec).
"""

from __future__ import annotations

import re
from typing import Any

_SURROGATE = re.compile("[\ud800-\udfff]")


def lone_surrogate(data: Any) -> tuple[tuple[Any, ...], str, bool] | None:
    """The first string in ``data`` (a string, or the keys and values of lists and mappings at any
    depth) holding a lone surrogate: its key path (a key's ends with the key itself), what is
    wrong, and whether it is a key; None when there is none."""
    stack: list[tuple[tuple[Any, ...], Any]] = [((), data)]
    while stack:  # iterative: a config nests up to 64 levels, a value read back may nest more
        path, value = stack.pop()
        if isinstance(value, str):
            if (m := _SURROGATE.search(value)) is not None:
                return path, f"text holds a lone surrogate ({m.group()!a}), not valid Unicode", False
        elif isinstance(value, dict):
            for k, v in value.items():
                if isinstance(k, str) and (m := _SURROGATE.search(k)) is not None:
                    return (*path, k), f"key {k!a} holds a lone surrogate ({m.group()!a}), not valid Unicode", True
                stack.append(((*path, k), v))
        elif isinstance(value, (list, tuple, set, frozenset)):
            stack.extend(((*path, i), v) for i, v in enumerate(value))
    return None
