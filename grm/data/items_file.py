"""``items.jsonl``: the judged items of an eval directory, recorded beside results.jsonl.

results.jsonl keeps judgments only; ``grm view`` shows each pair's prompt and responses from this
file, inside the directory it was given, and never re-opens the data source that
config.resolved.yaml names (that path is whatever the directory says: following it would let a
crafted directory show any readable file). One line per item, a ``v`` field for the layout.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from grm.data.items import EvalItem
from grm.jsonl import rewrite_jsonl

ITEMS_FILE = "items.jsonl"
ITEMS_VERSION = 1


class ItemRecord(BaseModel):
    """One judged item as an eval directory records it."""

    model_config = ConfigDict(extra="ignore")

    v: Literal[1] = ITEMS_VERSION
    """Layout version; a reader refuses a line of another version rather than misread it."""
    id: str
    kind: Literal["pair", "scored", "unlabelled"]
    prompt: str
    responses: list[str] = Field(max_length=2)
    """pair: [a, b]; otherwise one response."""
    label: int | None = None
    human_score: float | None = None
    reference: str | None = None
    input_hash: str = ""

    @classmethod
    def of(cls, item: EvalItem) -> ItemRecord:
        return cls(
            id=item.id,
            kind=item.kind,
            prompt=item.prompt,
            responses=list(item.responses),
            label=item.label,
            human_score=item.human_score,
            reference=item.reference,
            input_hash=item.input_hash,
        )


def write_items(out: Path, items: list[EvalItem]) -> None:
    """Record ``items`` in ``out/items.jsonl`` atomically (fsynced, one rename). Items already there
    and not among ``items`` stay (a resumed eval with a smaller ``--limit`` still has their results)."""
    path = out / ITEMS_FILE
    rows: dict[str, dict] = {}
    if path.is_file() and not path.is_symlink():
        # split on b"\n" only: U+2028/U+2029/U+0085 may stand raw inside JSON strings
        for line in path.read_bytes().split(b"\n"):
            try:
                row = json.loads(line.decode("utf-8"))
            except (ValueError, RecursionError):
                continue  # a torn or edited line: the items of this run are written again below
            if isinstance(row, dict) and isinstance(row.get("id"), str):
                rows[row["id"]] = row
    for it in items:
        rows[it.id] = ItemRecord.of(it).model_dump()
    rewrite_jsonl(path, rows.values())
