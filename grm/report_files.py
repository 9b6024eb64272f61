"""What every report.md writer shares (``grm run``'s, ``grm eval``'s and the policy evaluation's):
markdown tables and the PNG figures the report links.

Imports nothing from grm, so orchestrator and evaluation (which may not import each other) both
use it. matplotlib is imported inside the figure functions only: ``import grm`` and commands
that draw nothing never load it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
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


def save_figure(fig: Any, path: Path) -> None:
    """``fig`` laid out tight and written as a PNG at ``path`` (100 dpi), then closed, even when
    the write fails (an ``OSError`` the caller words)."""
    import matplotlib.pyplot as plt

    try:
        fig.tight_layout()
        fig.savefig(path, dpi=100)
    finally:
        plt.close(fig)
