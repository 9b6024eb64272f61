"""Summary tables on stdout that stay readable at any width.

A rich table squeezed into 80 columns wraps its headers letter by letter. On a terminal the
columns are therefore split over as many tables as the width needs (the first column, the judge,
repeated in each), every header and cell kept on one line; when stdout is a pipe or a file the
table is plain text at its natural width (no ANSI codes, one line per row), as logs and ``grep``
want it. Cells and titles (judge names, the output path) are untrusted text: never markup, and
their control characters escaped (``grm.terminal``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

CELL_OVERHEAD = 3
"""Characters a column of a boxed rich table takes beyond its text: one space each side and a rule."""


def column_widths(rows: Sequence[dict[str, str]]) -> dict[str, int]:
    cols = list(rows[0]) if rows else []
    return {c: max([len(c)] + [len(r.get(c, "")) for r in rows]) for c in cols}


def fit_columns(rows: Sequence[dict[str, str]], width: int) -> list[list[str]]:
    """The columns in groups that each fit ``width`` as one boxed table, in order; the first column
    leads every group. A column too wide even beside the first goes alone with it."""
    widths = column_widths(rows)
    cols = list(widths)
    if not cols:
        return []
    first, groups = cols[0], [[cols[0]]]
    used = 1 + widths[first] + CELL_OVERHEAD
    for c in cols[1:]:
        need = widths[c] + CELL_OVERHEAD
        if used + need > width and len(groups[-1]) > 1:
            groups.append([first])
            used = 1 + widths[first] + CELL_OVERHEAD
        groups[-1].append(c)
        used += need
    return groups


def plain_table(rows: Sequence[dict[str, str]], title: str | None = None) -> str:
    """Rows as aligned plain text: a header line, a rule, one line per row."""
    widths = column_widths(rows)
    if not widths:
        return title or ""

    def line(cells: dict[str, str]) -> str:
        return "  ".join(cells.get(c, "").ljust(w) for c, w in widths.items()).rstrip()

    out = [title] if title else []
    out += [line({c: c for c in widths}), "  ".join("-" * w for w in widths.values())]
    out += [line(r) for r in rows]
    return "\n".join(out)


def print_table(console: Any, rows: Sequence[dict[str, str]], title: str) -> None:
    """``rows`` (one dict per row, the same keys) on ``console``: fitted rich tables on a terminal,
    plain text elsewhere."""
    if not rows:
        return
    from rich.table import Table

    from grm.terminal import escape_controls, text

    # escaped before measuring: an escape is wider than the character it shows
    rows = [{escape_controls(k): escape_controls(v) for k, v in r.items()} for r in rows]
    title = escape_controls(title)
    if not console.is_terminal:
        console.print(text(plain_table(rows, title) + "\n"), soft_wrap=True)
        return

    groups = fit_columns(rows, console.width)
    for k, cols in enumerate(groups):
        part = f" ({k + 1}/{len(groups)})" if len(groups) > 1 else ""
        table = Table(title=text(title + part, "table.title"))
        for c in cols:
            table.add_column(text(c), no_wrap=True)
        for r in rows:
            table.add_row(*[text(r.get(c, "")) for c in cols])
        console.print(table)
