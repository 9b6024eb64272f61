"""What a judge's parser spec may hold: verdict tokens a reply can be read back by, log-prob
candidates within bounds, and a declared range for every pointwise or listwise score."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from grm.config import JudgeSpec
from grm.config.parsers import MAX_CANDIDATE_CHARS, MAX_CANDIDATES, LogprobParser, VerdictParser
from grm.judges.parsers import VerdictChoice
from tests.unit.fuzz.support import budget

# ------------------------------------------------------------------------------ verdict tokens


@pytest.mark.parametrize(
    ("tokens", "needle"),
    [
        ({"a": ""}, "a: a verdict token cannot be empty"),
        ({"b": "  \n"}, "b: a verdict token cannot be empty or blank"),
        ({"tie": ""}, "tie: a verdict token cannot be empty"),
        ({"a": "X", "b": "X", "tie": "X"}, "a and b are the same token 'X'"),
        ({"a": "[[A", "b": "[[A]]"}, "a ('[[A') is inside b ('[[A]]')"),  # a prefix: equal starts
        ({"a": "A]]", "b": "[[A]]"}, "a ('A]]') is inside b"),  # a suffix: a found after b's start
        ({"tie": "[[A]] or [[B]]"}, "a ('[[A]]') is inside tie"),
    ],
)
def test_verdict_tokens_that_cannot_be_told_apart_are_refused_naming_the_field(tokens, needle):
    with pytest.raises(ValidationError, match=needle.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")):
        VerdictParser(**tokens)
    with pytest.raises(ValidationError, match="rule.verdict"):  # a rule verdict judge reads the same tokens
        JudgeSpec(name="v", mode="rule", rule={"type": "verdict", "verdict": tokens})


def test_a_reply_without_a_verdict_is_a_failure_not_a():
    assert VerdictChoice(VerdictParser())("no verdict here").value is None
    assert VerdictParser(tie=None).tie is None


TOKEN = st.text(alphabet="AB[] ", min_size=0, max_size=4)  # a small alphabet: overlaps are likely


@settings(max_examples=budget(300), deadline=None)
@given(a=TOKEN, b=TOKEN, tie=st.none() | TOKEN, before=st.text(alphabet="xy ", max_size=3))
def test_every_accepted_set_of_tokens_reads_back_the_verdict_written_last(a, b, tie, before):
    """Soundness and completeness of the check against the parser itself: the tokens are refused
    exactly when one is blank or inside another, and with accepted ones the last token written is
    the verdict read, whatever was written before it."""
    tokens = {"A": a, "B": b, **({"tie": tie} if tie is not None else {})}
    values = list(tokens.values())
    bad = any(not t.strip() for t in values) or any(s in t for i, s in enumerate(values) for j, t in enumerate(values) if i != j)
    try:
        spec = VerdictParser(a=a, b=b, tie=tie)
    except ValidationError:
        assert bad
        return
    assert not bad
    read = VerdictChoice(spec)
    for label, tok in tokens.items():
        for other in values:
            assert read(before + other + " " + tok).value == label
        assert read(before + tok).value == label


# ------------------------------------------------------------------------------ log-prob candidates


@pytest.mark.parametrize(
    ("rng", "needle"),
    [
        ([0.2, 0.8], "holds 0 whole number"),
        ([3, 3.5], "holds 1 whole number"),
        ([1, 1e12], "holds 1,000,000,000,000 whole numbers"),
        ([0, MAX_CANDIDATES], f"holds {MAX_CANDIDATES + 1:,} whole numbers"),
        ([5, 1], "the low end must be below the high end"),
    ],
)
def test_a_logprob_range_must_give_between_two_and_the_bound_of_candidates(rng, needle):
    with pytest.raises(ValidationError, match=needle):
        LogprobParser(prefix="", range=rng, critique=False)


def test_logprob_ranges_and_candidates_within_the_bounds_are_kept():
    assert LogprobParser(range=[1, MAX_CANDIDATES]).range == (1, MAX_CANDIDATES)
    assert LogprobParser(range=[0.5, 2.5]).range == (0.5, 2.5)  # 1 and 2
    assert LogprobParser(range=[0.2, 0.8], candidates=["0.2", "0.8"]).candidates  # candidates given: range is their span
    with pytest.raises(ValidationError, match=f"at most {MAX_CANDIDATES}"):
        LogprobParser(candidates=[str(i) for i in range(MAX_CANDIDATES + 1)])
    with pytest.raises(ValidationError, match=f"at most {MAX_CANDIDATE_CHARS}"):
        LogprobParser(candidates=["1", "2" * (MAX_CANDIDATE_CHARS + 1)])


# ------------------------------------------------------------------------------ declared score ranges

MODEL = {"name": "j", "model": "m", "template": "t.j2"}


@pytest.mark.parametrize(
    ("mode", "parser"),
    [
        ("pointwise", {}),  # the default parser: a regex
        ("pointwise", {"type": "regex"}),
        ("pointwise", {"type": "json"}),
        ("pointwise", {"type": "target", "target": "mine:score"}),
        ("listwise", {"type": "boxed"}),
        ("listwise", {"type": "json"}),
        ("pointwise", {"type": "logprob", "range": None, "candidates": ["1", "2"]}),
    ],
)
def test_a_pointwise_or_listwise_judge_without_a_declared_range_is_refused(mode, parser):
    with pytest.raises(ValidationError, match=r"parser.range: a (pointwise|listwise)"):
        JudgeSpec(**MODEL, mode=mode, parser=parser)
    with pytest.raises(ValidationError, match=r"parser.range"):  # normalize clips: it does not replace the range
        JudgeSpec(**MODEL, mode=mode, parser=parser, normalize={"low": 0, "high": 1})


def test_judges_whose_scores_are_bounded_need_no_range():
    JudgeSpec(**MODEL, mode="pointwise", parser={"type": "regex", "range": [0, 100]})
    JudgeSpec(**MODEL, mode="pointwise", parser={"range": [1, 10]})  # type regex by default
    JudgeSpec(**MODEL, mode="pointwise", parser={"type": "target", "target": "mine:score", "range": [0, 1]})
    JudgeSpec(**MODEL, mode="pointwise", parser={"type": "logprob"})  # range [1, 10] by default
    JudgeSpec(**MODEL, mode="pointwise", parser={"type": "logprob", "range": None, "candidates": ["a", "b"], "values": [0, 1]})
    JudgeSpec(**MODEL, mode="pairwise", parser={"type": "verdict"})
    JudgeSpec(**MODEL, mode="pairwise", parser={"type": "logprob", "candidates": ["0", "100"]})  # A and B, not scores
    JudgeSpec(name="r", mode="rule", rule={"type": "numeric-answer"})


def test_numeric_pointwise_candidates_lie_inside_the_range_rewards_map():
    with pytest.raises(ValidationError, match=r"parser.candidates \['0', '100'\] lie outside parser.range \[1, 10\]"):
        JudgeSpec(**MODEL, parser={"type": "logprob", "candidates": ["0", "100"]})
    JudgeSpec(**MODEL, parser={"type": "logprob", "candidates": ["0", "100"], "range": [0, 100]})
