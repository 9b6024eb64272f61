"""What every report.md writer shares (``grm run``'s, ``grm eval``'s and the policy evaluation's):
markdown tables and the PNG figures the report links.

Imports nothing from grm, so orchestrator and evaluation (which may not import each other) both
use it. matplotlib is imported inside the figure functions only: ``import grm`` and commands
that draw nothing never load it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    """A markdown table's lines: ``header``, its rule, one line per row of cells. Cells are written
    as given: a cell holding ``|`` or a newline breaks its row."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(cells) + " |" for cells in rows]


def new_figure(**subplots: Any) -> tuple[Any, Any]:
    """``matplotlib.pyplot.subplots(**subplots)`` on the Agg backend (files only: no display is
    needed or opened)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(**subplots)


def figure_png(fig: Any) -> bytes:
    """``fig`` laid out tight as PNG bytes (100 dpi), then closed, even when drawing fails. The
    caller writes them with ``grm.base.atomic_write_bytes``, which replaces a link planted at the
    name instead of writing through it (``savefig(path)`` would follow it)."""
    import io

    import matplotlib.pyplot as plt

    try:
        fig.tight_layout()
        png = io.BytesIO()
        fig.savefig(png, format="png", dpi=100)
    finally:
        plt.close(fig)
    return png.getvalue()
