"""How large a Jinja2 template file a spec may reference (a judge's ``template``, its principles' and
checklist's): checked when the spec loads, before the template is compiled.

Compiling is the cost: a 1 MB template of ``{% if prompt %}x{% endif %}`` took 6-9 s to compile on
the 2-core reference machine (about 7 us a character), and a judge compiles up to three.
"""

from __future__ import annotations

from pathlib import Path

from grm.base import GrmError, regular_file_bytes

MAX_TEMPLATE_CHARS = 65_536
"""Characters of one template at most: 35x the largest shipped one (``prompts/trajectory-yesno.j2``,
1,873 characters), about 0.5 s of compiling at the rate above. A template is instructions and a few
examples; data reaches it through its variables."""


class _Unreadable(GrmError):
    pass


def template_size_problem(path: Path) -> str | None:
    """Why the template file ``path`` is too large to compile, or None (also when it cannot be
    read: the template loader says why). UTF-8 holds at most 4 bytes a character, so a file past
    ``4 x MAX_TEMPLATE_CHARS`` bytes is refused unread."""
    limit = f"a template holds at most {MAX_TEMPLATE_CHARS:,} characters (the shipped ones under 2,000)"
    try:
        size = path.stat().st_size
        raw = None if size > 4 * MAX_TEMPLATE_CHARS else regular_file_bytes(path, _Unreadable, limit=4 * MAX_TEMPLATE_CHARS)
    except (OSError, _Unreadable):  # gone, a FIFO, grew past the limit since the stat: the loader says
        return None
    if raw is None:
        return f"{path}: {size:,} bytes; {limit}" if size > 4 * MAX_TEMPLATE_CHARS else None
    chars = len(raw.decode("utf-8", errors="replace"))
    return f"{path}: {chars:,} characters; {limit}" if chars > MAX_TEMPLATE_CHARS else None
