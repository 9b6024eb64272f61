"""Adaptive votes: a judge draws ``first`` critiques of every item, then the rest of its
``sampling.n`` only for the items whose reward the extra votes could still change.
``grm.judges.adaptive`` picks those items; ``grm.judges.model`` draws their votes."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from grm.config.base import Strict


class AdaptiveVotes(Strict):
    """(pointwise and pairwise model judges with ``sampling.n`` > ``first``) Which items get the
    rest of their votes after every item has ``first``:

    - an item none of whose first critiques parsed (after retries);
    - pointwise, inside a group (one prompt's responses in ``grm run``): a response whose reward is
      within ``margin`` of another's, so their order, and the advantages, could still swap;
    - pairwise: an item whose presentation orders disagree (one prefers A, the other B), or whose
      reward is within ``margin`` of a tie (0.5);
    - a log-prob reading (``parser.type: logprob`` after a critique) whose most likely candidate has
      probability below ``confidence``.

    At most ``budget`` of the items get extra votes in one call (the least decided first: no parse,
    then the closest margins, then the least confident). An item that gets them has ``sampling.n``
    critiques per view, like fixed voting; the others keep ``first``. ``JudgeCost.votes_skipped``
    counts the critiques fixed voting would have drawn and adaptive voting did not."""

    first: int = Field(1, ge=1, le=1023)
    """Critiques every item gets (per presentation order) before any is judged decided."""
    margin: float = Field(0.1, ge=0, le=1)
    """Rewards (on the judge's 0-1 scale) this close are near-tied: pointwise, two responses of a
    group; pairwise, an item and the tie at 0.5."""
    confidence: float = Field(0.0, ge=0, le=1)
    """A log-prob reading whose top candidate's probability (renormalised over the candidates) is
    below this asks for more votes; 0 turns the check off."""
    budget: float = Field(1.0, gt=0, le=1)
    """The share of a call's items that may get extra votes (rounded up)."""


def check_votes(spec: Any) -> None:
    """Refuse adaptive votes a judge cannot use (ValueError naming the field)."""
    votes = spec.votes
    if votes is None:
        return
    if spec.mode not in ("pointwise", "pairwise"):
        raise ValueError(f"votes (adaptive) is for pointwise and pairwise model judges, not mode '{spec.mode}'")
    if votes.first >= spec.sampling.n:
        raise ValueError(
            f"votes.first ({votes.first}) must be below sampling.n ({spec.sampling.n}): the extra votes are the difference"
        )
    if spec.parser.type == "logprob" and not spec.parser.critique:
        raise ValueError("votes: a log-prob reading without a critique is deterministic; there is nothing to vote again")
    if spec.sampling.temperature == 0:
        raise ValueError("votes: with sampling.temperature 0 every extra critique repeats the first")
