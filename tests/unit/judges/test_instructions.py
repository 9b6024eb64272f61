"""Rule checkers of verifiable constraints on hand-written responses (passing and failing, with
edge cases), and the ``constraints`` rule verifier: strict, per-type details, masked without
constraints, a malformed list named."""

import json

import pytest

from grm.config.judge import JudgeSpec
from grm.data.constraints import ARGS
from grm.judges.base import score_one
from grm.judges.errors import JudgeError
from grm.judges.instructions import CHECKS, check_constraint
from grm.judges.runtime import build_judge, load
from grm.judges.types import Sample

# (constraint, response, holds)
CASES = [
    # lowercase
    ({"type": "lowercase"}, "all of this is lowercase, even café and naïve.", True),
    ({"type": "lowercase"}, "all lowercase but one Word.", False),
    ({"type": "lowercase"}, "ÉCOLE is shouted here.", False),  # non-ASCII capitals count
    ({"type": "lowercase"}, "ǅ is titlecase, not lowercase", False),
    ({"type": "lowercase"}, "12345 !!!", False),  # no letter at all: nothing was written in lowercase
    ({"type": "lowercase"}, "ｈｅｌｌｏ ｔｈｅｒｅ", True),  # full-width letters normalise to ASCII lowercase
    # max_words / min_words
    ({"type": "max_words", "n": 5}, "one two three four five", True),
    ({"type": "max_words", "n": 5}, "one two three four five six", False),
    ({"type": "max_words", "n": 5}, "one - two — three * four five\n\n", True),  # dashes and bullets are not words
    ({"type": "max_words", "n": 3}, "well-known don't matter", True),
    ({"type": "min_words", "n": 4}, "  a b\tc\nd  ", True),
    ({"type": "min_words", "n": 4}, "a b c ...", False),
    # bullets
    ({"type": "bullets", "n": 3}, "Tips:\n* one\n- two\n  * three (indented)\nDone.", True),
    ({"type": "bullets", "n": 3}, "* one\n* two", False),
    ({"type": "bullets", "n": 2}, "• one\n• two", True),
    ({"type": "bullets", "n": 2}, "* one\n* two\n* * *\n**bold** line\n-not a bullet", True),  # a rule, bold, no space
    ({"type": "bullets", "n": 2}, "1. one\n2. two", False),  # numbered lists are not the asked-for bullets
    # keyword / forbidden_word
    ({"type": "keyword", "word": "budget"}, "Keep a BUDGET handy.", True),
    ({"type": "keyword", "word": "budget"}, "Budgeting helps.", False),  # a whole word, not a prefix
    ({"type": "keyword", "word": "café"}, "Meet at the CAFÉ.", True),
    ({"type": "forbidden_word", "word": "very"}, "Every day is everything.", True),
    ({"type": "forbidden_word", "word": "very"}, "It was Very nice.", False),
    ({"type": "forbidden_word", "word": "very"}, "very", False),
    # end_phrase / start_phrase
    ({"type": "end_phrase", "phrase": "Happy to help."}, "Sure thing. Happy to help.  \n\n", True),  # trailing whitespace
    ({"type": "end_phrase", "phrase": "Happy to help."}, "sure thing. happy to help.", True),  # a lowercase response
    ({"type": "end_phrase", "phrase": "Happy to help."}, "Happy to help. Bye.", False),
    ({"type": "end_phrase", "phrase": "Happy to help."}, "Happy to help", False),  # the stop is part of the phrase
    ({"type": "start_phrase", "phrase": "In short:"}, "\n  In short: do it.", True),
    ({"type": "start_phrase", "phrase": "In short:"}, "Well, in short: do it.", False),
    # no_commas
    ({"type": "no_commas"}, "No commas here. Not one!", True),
    ({"type": "no_commas"}, "One, two.", False),
    ({"type": "no_commas"}, "Full-width comma\uff0cstill a comma", False),
    ({"type": "no_commas"}, "Ideographic comma、too", False),
    # json_key
    ({"type": "json_key", "key": "answer"}, '{"answer": "Tea is nice."}', True),
    ({"type": "json_key", "key": "answer"}, '```json\n{"answer": "Tea is nice."}\n```\n', True),  # a code fence
    ({"type": "json_key", "key": "answer"}, '```\n{"answer": ["a", "b"]}\n```', True),
    ({"type": "json_key", "key": "answer"}, 'Here it is: {"answer": "Tea."}', False),  # text around the JSON
    ({"type": "json_key", "key": "answer"}, "[" * 100_000 + "]" * 100_000, False),  # nested past any recursion limit
    ({"type": "json_key", "key": "answer"}, '{"answer": ' + "[" * 100_000 + "]" * 100_000 + "}", False),
    ({"type": "json_key", "key": "answer"}, '{"Answer": "Tea."}', False),  # the key is case-sensitive
    ({"type": "json_key", "key": "answer"}, '{"answer": "Tea.", "note": "x"}', False),  # a single key
    ({"type": "json_key", "key": "answer"}, '{"answer": "  "}', False),  # an empty answer
    ({"type": "json_key", "key": "answer"}, '{"answer": "Tea."', False),
    # paragraphs
    ({"type": "paragraphs", "n": 2}, "First part.\nStill first.\n\nSecond part.", True),
    ({"type": "paragraphs", "n": 2}, "First.\n  \t\nSecond.\n\n\n", True),  # a blank line may hold spaces
    ({"type": "paragraphs", "n": 2}, "Only one paragraph.\nWith two lines.", False),
    ({"type": "paragraphs", "n": 2}, "One.\n\nTwo.\n\nThree.", False),
    # max_sentences
    ({"type": "max_sentences", "n": 2}, "Tea is good! Is it hot?", True),
    ({"type": "max_sentences", "n": 2}, "Tea is good. It is hot. I like it.", False),
    ({"type": "max_sentences", "n": 2}, "<<Tea>>\n\nTea is good. It is 3.5 degrees warmer", True),  # title and decimals
    ({"type": "max_sentences", "n": 1}, "line one\nline two", False),  # a line break ends a sentence
    # title
    ({"type": "title", "n": None}, "<<Brewing tea>>\nBoil water.", True),
    ({"type": "title"}, "<<   >> no words inside", False),
    ({"type": "title"}, "<Brewing tea> single brackets", False),
    # postscript
    ({"type": "postscript"}, "Body text.\n\nP.S. See you soon.", True),
    ({"type": "postscript"}, "body text.\np.s. see you soon.", True),  # a lowercase response
    ({"type": "postscript"}, "Body.\nPS see you", False),
    ({"type": "postscript"}, "Body. P.S. inline is not a postscript line", False),
    ({"type": "postscript"}, "Body.\nP.S.", False),  # an empty postscript
]


@pytest.mark.parametrize("constraint, response, holds", CASES, ids=lambda v: v["type"] if isinstance(v, dict) else None)
def test_checker(constraint, response, holds):
    constraint = {k: v for k, v in constraint.items() if v is not None}
    assert check_constraint(constraint, response) is holds


def test_every_constraint_type_has_a_checker_and_hand_written_cases_both_ways():
    assert set(CHECKS) == set(ARGS)
    for kind in ARGS:
        outcomes = {holds for c, _, holds in CASES if c["type"] == kind}
        assert outcomes == {True, False}, kind


@pytest.mark.parametrize("kind", list(ARGS))
def test_a_blank_response_follows_nothing(kind):
    args = {"n": 3, "word": "tea", "phrase": "Bye.", "key": "answer"}
    constraint = {"type": kind, **{a: args[a] for a in ARGS[kind]}}
    assert check_constraint(constraint, " \n\t") is False


def verifier():
    return load("builtin:constraints")


def test_verifier_is_strict_and_keeps_per_type_details():
    cons = [{"type": "lowercase"}, {"type": "max_words", "n": 4}, {"type": "no_commas"}]
    judge = verifier()
    ok, one_off, all_off = judge.score_batch(
        [
            Sample(prompt="p", response="tea is nice", metadata={"constraints": cons}, id="a"),
            Sample(prompt="p", response="tea is very nice indeed", metadata={"constraints": cons}, id="b"),
            Sample(prompt="p", response="Tea, is very nice indeed", metadata={"constraints": cons}, id="c"),
        ]
    )
    assert (ok.score, ok.reward, ok.details) == (1.0, 1.0, {"lowercase": 1.0, "max_words": 1.0, "no_commas": 1.0})
    assert (one_off.score, one_off.details) == (0.0, {"lowercase": 1.0, "max_words": 0.0, "no_commas": 1.0})
    assert all_off.score == 0.0 and set(all_off.details.values()) == {0.0}
    assert "fails 1 of 3 constraints: max_words" in one_off.samples[0].text
    assert not one_off.masked and one_off.parse_failures == 0  # a broken constraint is a verdict, not a failure
    assert json.loads(json.dumps(one_off.to_dict()))["details"] == one_off.details  # what results.jsonl keeps


def test_verifier_masks_a_sample_without_constraints():
    judge = verifier()
    for meta in ({}, {"constraints": None}, {"constraints": []}):
        r = score_one(judge, Sample(prompt="p", response="tea", metadata=meta))
        assert r.masked and r.score is None and r.reward is None and r.details is None
        assert r.parse_failures == 1 and "no constraints to verify" in r.error


def test_verifier_names_the_item_with_malformed_constraints():
    with pytest.raises(JudgeError, match=r"item x7: metadata.constraints item 0: unknown constraint type 'loud'"):
        score_one(verifier(), Sample(prompt="p", response="tea", metadata={"constraints": [{"type": "loud"}]}, id="x7"))


def test_constraints_rule_in_a_judge_spec(tmp_path):
    spec = JudgeSpec(name="c", mode="rule", rule={"type": "constraints"})
    r = score_one(build_judge(spec, tmp_path), Sample(prompt="p", response="x", metadata={"constraints": '[{"type": "title"}]'}))
    assert r.score == 0.0 and r.details == {"title": 0.0}  # JSON text, as a CSV cell holds it
