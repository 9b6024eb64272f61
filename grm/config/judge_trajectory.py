"""How a model judge is shown whole trajectories (multi-turn, tool-using episodes): the budget of
each observation, the environment signals it may see, and the process judge option.
``grm.judges.trajectory_view`` applies it."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from grm.config.base import MAX_TOKENS, Strict


class TrajectoryJudgeSpec(Strict):
    """(judges of trajectories: pointwise ``trajectory``, pairwise and listwise ``trajectories``)
    What the judge's template sees of an episode (``trajectory``/``trajectories``: the task, every
    turn with its tool calls and results, the final answer, the signals shown, the end reason).

    Each observation (a tool result or a user turn) is cut to ``observation_tokens`` judge tokens
    when the judge's engine is loaded and has a fast tokenizer, else to ``observation_chars``
    characters: its head and tail are kept around a note, and ``JudgeResult.observations_cut``
    counts the cuts. If the whole prompt still does not fit the judge's context window (less
    ``sampling.max_new_tokens`` and a small reserve; ``max_prompt_chars`` when the engine cannot
    count tokens or knows no window), the oldest turns are left out (the template shows how many,
    ``omitted``), keeping the task, the last turn and the final answer; then the longest texts are
    cut. Such a trajectory counts in ``JudgeResult.truncated``. No prompt is sent over the window."""

    observation_tokens: int = Field(256, ge=1, le=MAX_TOKENS)
    """Judge-model tokens each observation keeps (counted with the judge's own tokenizer), besides
    the note saying how much was cut."""
    observation_chars: int = Field(1024, ge=1, le=1 << 26)
    """Characters each observation keeps when the engine cannot count tokens (not loaded yet, as
    in ``grm judge render``, or no local fast tokenizer)."""
    max_prompt_chars: int = Field(64_000, ge=1, le=1 << 30)
    """Characters the whole rendered judge prompt may take when the engine cannot count tokens or
    knows no context window."""
    signals: list[str] = []
    """Names of the environment's signals (``Trajectory.signals``) the judge is shown; the others
    are left out of the view. Default none: a rule outcome the judge must not see (a held-out
    ``success``) never reaches it unless listed here."""
    first_faulty_turn: bool = False
    """(pointwise) Process judge: the judge also names the first faulty turn, on a line
    ``First faulty turn: N`` (N the turn's number as the template shows it, ``index + 1``) or
    ``First faulty turn: none``. Read from each critique (its last such line) into
    ``SampleRecord.faulty_turn`` and voted into ``JudgeResult.faulty_turn``; a critique without a
    readable line keeps its score and names none. The template must ask for the line."""


def check_trajectory_judge(spec: Any) -> None:
    """What a ``JudgeSpec``'s ``trajectory`` section may hold for its mode."""
    t = spec.trajectory
    if t.first_faulty_turn and spec.mode != "pointwise":
        raise ValueError(
            f"trajectory.first_faulty_turn: a pointwise judge names a trajectory's first faulty turn, not {spec.mode}"
        )
    if len(set(t.signals)) != len(t.signals):
        raise ValueError(f"trajectory.signals: a name is listed twice in {t.signals}")
