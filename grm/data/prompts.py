"""The prompt stream: a data set shuffled by seed every epoch, with a resumable position."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from grm.config.judge import JudgeSpec
from grm.config.pipeline import DataSpec, PipelineSpec
from grm.data import constraints
from grm.data.checklists import METADATA_KEY, check_length, read_checklist
from grm.data.constraint_cell import read_constraints
from grm.data.errors import DataError
from grm.data.sources import load_rows, row_where


@dataclass
class Prompt:
    id: str
    text: str
    reference: str | None
    metadata: dict[str, Any] = field(default_factory=dict)
    """What judges get besides the text and reference (``Sample.metadata``): the prompt's
    ``checklist`` (``data.checklist_field``), checked by ``grm.data.checklists``, and its
    ``constraints`` (``data.constraints_field``), checked by ``grm.data.constraints``."""
    where: str = ""
    """Where it was read (``FILE:LINE``, or ``SOURCE row N``), for messages about it."""
    row: dict[str, Any] = field(default_factory=dict)
    """The whole data row: what an environment's ``reset`` starts an episode from (``env:``)."""
    messages: list[dict[str, str]] | None = None
    """The whole chat the policy is asked, instead of ``text`` after the policy's system prompt
    (``data.judge_prompts``: a judge's rendered request; a last assistant message is continued)."""
    baseline: str | None = None
    """Prompts of one step with the same key share one group-relative baseline: their responses are
    one group for the advantages (``data.judge_baseline: pair``: a labelled pair's two orders).
    None: the prompt's own responses are its group."""


def load_prompts(spec: DataSpec) -> list[Prompt]:
    rows = load_rows(spec.prompts)
    if spec.limit is not None:
        rows = rows[: spec.limit]
    out = []
    for i, row in enumerate(rows):
        where = row_where(spec.prompts, row, i)
        text = row.get(spec.prompt_field)
        if not isinstance(text, str) or not text.strip():
            raise DataError(f"{where}: column '{spec.prompt_field}' must be a non-empty string")
        ref = row.get(spec.reference_field) if spec.reference_field else None
        meta = {}
        if spec.checklist_field:
            meta[METADATA_KEY] = read_checklist(row.get(spec.checklist_field), f"{where}: column '{spec.checklist_field}'")
        if spec.constraints_field:
            meta[constraints.METADATA_KEY] = read_constraints(
                row.get(spec.constraints_field), f"{where}: column '{spec.constraints_field}'"
            )
        out.append(
            Prompt(
                id=str(row.get("id", f"row-{i}")),
                text=text,
                reference=None if ref is None else str(ref),
                metadata=meta,
                where=where,
                row=dict(row),
            )
        )
    return out


def check_checklists(prompts: Sequence[Prompt], spec: DataSpec, judges: Sequence[JudgeSpec]) -> None:
    """Every data checklist fits the checklist judges that read it (``checklist.max_items``), or a
    ``DataError`` naming the first row that does not (``grm.data.checklists.check_length``)."""
    for j in judges:
        if j.checklist is None or j.checklist.source != "data":
            continue
        for i, p in enumerate(prompts):
            where = f"{p.where or f'{spec.prompts} row {i}'}: column '{spec.checklist_field}'"
            check_length(p.metadata.get(METADATA_KEY) or [], j.checklist.max_items, j.name, where)


def prompt_stream(cfg: PipelineSpec, judges: Sequence[JudgeSpec], prompts: list[Prompt] | None = None) -> PromptStream:
    """A pipeline's prompts (``prompts`` when the caller made them: a judge's training prompts,
    ``data.judge_prompts``, two orders a pair), every row checked (and every data checklist against
    the judges that read it), as the seeded stream ``grm run`` takes its steps from."""
    if prompts is None:
        prompts = load_prompts(cfg.data)
        check_checklists(prompts, cfg.data, judges)
    return PromptStream(prompts, cfg.seed, cfg.data.shuffle, block=2 if cfg.data.judge_prompts else 1)


class PromptStream:
    """Yields prompts epoch after epoch; each epoch is a fresh seeded shuffle."""

    def __init__(self, prompts: list[Prompt], seed: int, shuffle: bool = True, block: int = 1) -> None:
        """``block``: that many consecutive prompts stay together through the shuffle (a pair's two
        orders); ``prompts`` must come in whole blocks."""
        if block < 1 or len(prompts) % block:
            raise ValueError(f"{len(prompts)} prompts do not come in blocks of {block}")
        self.prompts = prompts
        self.seed = seed
        self.shuffle = shuffle
        self.block = block
        self.epoch = 0
        self.index = 0
        self._order = self._make_order()

    def _make_order(self) -> list[int]:
        blocks = list(range(len(self.prompts) // self.block))
        if self.shuffle:
            random.Random(f"{self.seed}:{self.epoch}").shuffle(blocks)
        return [b * self.block + i for b in blocks for i in range(self.block)]

    def take(self, n: int) -> list[Prompt]:
        out = []
        while len(out) < n:
            if self.index >= len(self._order):
                self.epoch += 1
                self.index = 0
                self._order = self._make_order()
            out.append(self.prompts[self._order[self.index]])
            self.index += 1
        return out

    def state(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "index": self.index}

    def state_before(self, n: int) -> dict[str, Any]:
        """The state ``n`` prompts back (prompts taken but never trained on are taken again after a
        resume), stepping back across epoch boundaries."""
        epoch, index = self.epoch, self.index - n
        while index < 0 and epoch > 0:
            epoch -= 1
            index += len(self.prompts)
        return {"epoch": epoch, "index": max(0, index)}

    def restore(self, state: dict[str, Any]) -> None:
        self.epoch, self.index = state["epoch"], state["index"]
        self._order = self._make_order()
