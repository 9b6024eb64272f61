"""The run's store of previous anchors (a pairwise judge's ``groups.anchor: previous``): per prompt,
the greedy response the policy gave the last time the prompt was rolled out in a trained step.
Ray-free and pure apart from its own state; the driver feeds it and checkpoints it, the scheduler
reads it when a rollout chunk lands (``attach``), before any judge sees the chunk.

Determinism, so a resumed run compares with the same anchors as an uninterrupted one:

- Only trained steps are written (``remember``, after the step is logged), in step order, so the
  checkpoint of step N holds exactly steps < N: the untrained steps queued ahead are given back
  with their prompts and redone after a resume.
- Step s reads only steps <= s - ``lag`` (``lag`` = 1 in sync mode, 1 + max_staleness in async):
  an async step's rollouts may land before or after the step before it is trained, and the steps
  up to s - lag are trained in either case. A prompt keeps the entries a future step may still
  ask for (the newest at or below the horizon, and any newer): at most ``lag``.
- Forgetting (``capacity`` prompts, least recently rolled out first) happens only when a step is
  written, so it follows the step order too; reads do not count as use.

A prompt is keyed by its id and checked against a digest of its text: another prompt with the same
id finds nothing (and gets the fallback) rather than someone else's answer.

The store lives in the driver only. The anchor travels inside the samples a judge call carries
(``metadata["previous_anchor"]``), so every replica of a judge sees the same one, and a policy
worker group's greedy answers arrive with rank 0's gathered groups like the rest of the rollout.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from grm.config.judge import JudgeSpec
from grm.config.pipeline import PipelineSpec
from grm.orchestrator.types import Group

STATE_VERSION = 1


@dataclass(frozen=True)
class Anchor:
    """One greedy response remembered for a prompt."""

    text: str
    policy_version: int
    """Weights version that produced it."""
    step: int
    """The step (1-based, as in metrics.jsonl) whose rollout produced it."""
    digest: str
    """Digest of the prompt's text it answers."""

    def info(self) -> dict[str, Any]:
        """What a sample carries to the judge (``metadata["previous_anchor"]``) and samples.jsonl."""
        return {"text": self.text, "policy_version": self.policy_version, "step": self.step}


def digest(prompt_text: str) -> str:
    return hashlib.sha256(prompt_text.encode()).hexdigest()[:16]


class AnchorStore:
    def __init__(self, capacity: int, lag: int) -> None:
        if capacity < 1 or lag < 1:
            raise ValueError(f"capacity ({capacity}) and lag ({lag}) must be at least 1")
        self.capacity, self.lag = capacity, lag
        self.prompts: OrderedDict[str, list[Anchor]] = OrderedDict()
        """prompt id -> its entries, oldest first; the dict in least-recently-written order."""

    def __len__(self) -> int:
        return len(self.prompts)

    def lookup(self, step: int, prompt_id: str, prompt_text: str) -> Anchor | None:
        """The anchor for a rollout of step ``step`` (1-based): the newest entry of a step at most
        ``step - lag`` for this prompt, or None."""
        horizon = step - self.lag
        found = [a for a in self.prompts.get(prompt_id, []) if a.step <= horizon]
        if not found or found[-1].digest != digest(prompt_text):
            return None
        return found[-1]

    def write(self, step: int, entries: Iterable[tuple[str, str, str, int]]) -> None:
        """Remember trained step ``step``'s greedy responses, ``(prompt id, prompt text, response,
        policy version)`` in the step's order (a prompt twice in one step: the later one stays);
        then forget the least recently written prompts beyond ``capacity``."""
        horizon = step + 1 - self.lag  # the lowest step a later lookup reads up to
        for pid, prompt_text, text, version in entries:
            kept = [a for a in self.prompts.pop(pid, []) if a.step != step]
            kept.append(Anchor(text, version, step, digest(prompt_text)))
            below = [k for k, a in enumerate(kept) if a.step <= horizon]
            self.prompts[pid] = kept[below[-1] :] if below else kept
        while len(self.prompts) > self.capacity:
            self.prompts.popitem(last=False)

    def state(self) -> dict[str, Any]:
        """JSON-ready contents, in forgetting order."""
        return {
            "version": STATE_VERSION,
            "prompts": [[pid, [asdict(a) for a in entries]] for pid, entries in self.prompts.items()],
        }

    def restore(self, state: dict[str, Any]) -> None:
        """Contents saved by ``state`` (a smaller ``capacity`` now forgets the oldest at once)."""
        if state.get("version") != STATE_VERSION:
            raise ValueError(f"anchor store state version {state.get('version')!r}, expected {STATE_VERSION}")
        self.prompts = OrderedDict((pid, [Anchor(**a) for a in entries]) for pid, entries in state["prompts"])
        while len(self.prompts) > self.capacity:
            self.prompts.popitem(last=False)


def attach(store: AnchorStore, step: int, groups: Iterable[Group]) -> None:
    """Give each landed group of step ``step`` (1-based) its prompt's previous anchor, if any."""
    for g in groups:
        if g.rollouts:
            p = g.rollouts[0].prompt
            found = store.lookup(step, p.id, p.text)
            g.previous = None if found is None else found.info()


def remember(store: AnchorStore, step: int, groups: Iterable[Group]) -> None:
    """Write the greedy responses of trained step ``step``'s groups (1-based)."""
    store.write(
        step,
        [
            (g.rollouts[0].prompt.id, g.rollouts[0].prompt.text, g.anchor, g.rollouts[0].version)
            for g in groups
            if g.rollouts and g.anchor is not None
        ],
    )


def store_for(cfg: PipelineSpec, judges: Iterable[JudgeSpec]) -> AnchorStore | None:
    """The run's store when a judge compares with previous anchors, else None. Its lag follows the
    scheduler's: rollouts run ``max_staleness`` steps ahead in async mode."""
    wanted = [
        j.groups.remember
        for j in judges
        if j.mode == "pairwise" and j.groups.strategy == "anchor" and j.groups.anchor == "previous"
    ]
    if not wanted:
        return None
    ahead = cfg.schedule.ahead
    return AnchorStore(max(wanted), 1 + ahead)
