"""Checklist judges (``grm.judges.checklist``) with a scripted engine: P(yes) read off the yes/no
log-probs and weighted, unread questions and masking, the written checklist parsed and cached once
per prompt, the data's checklist checked, and the spec's validation messages."""

import math

import pytest
from pydantic import ValidationError

from grm.config import JudgeSpec
from grm.judges import JudgeError, Sample, build_judge
from grm.judges.base import score_one
from grm.judges.checklist import ChecklistJudge, checklist_score, parse_written
from grm.judges.limits import prompts_per_sample, tokens_per_sample
from grm.judges.render import render
from grm.judges.rescore import rescore
from tests.unit.judges.fake_engine import ScriptedEngine

LN = math.log


def spec(tmp_path, source="model", **kw):
    (tmp_path / "q.j2").write_text(
        "{# expects: prompt, response, question #}Request: {{ prompt }}\nAnswer: {{ response }}\nQuestion: {{ question }}"
    )
    (tmp_path / "w.j2").write_text("{# expects: prompt #}Write a checklist for: {{ prompt }}")
    checklist = {"source": source, **({"template": "w.j2", "max_items": 3} if source == "model" else {})}
    return JudgeSpec(
        name="ck",
        mode="checklist",
        model="m",
        template="q.j2",
        checklist={**checklist, **kw.pop("checklist", {})},
        prefill="Verdict:",
        parser={"type": "logprob", "prefix": "", "candidates": [" Yes", " No"], "critique": False},
        **kw,
    )


def p_yes_by_question(table):
    """continuation log-probs (yes, no) chosen by the question in the rendered judge prompt."""

    def lps(text, candidates):
        assert candidates == [" Yes", " No"]  # the spec's candidates, read as given (no prefix split)
        question = text.split("Question: ")[1].split("\n")[0]
        return table[question]

    return lps


WRITTEN = "Here is the checklist:\n1. Is it correct?\n2) **Is it short?**\n- Is it polite?\n4. Is it kind?\nThanks."


def test_parse_written_reads_numbered_and_bulleted_lines():
    assert [q["question"] for q in parse_written(WRITTEN, 10)] == [
        "Is it correct?",
        "Is it short?",
        "Is it polite?",
        "Is it kind?",
    ]
    assert [q["question"] for q in parse_written(WRITTEN, 2)] == ["Is it correct?", "Is it short?"]  # max_items: the first
    assert parse_written("1. Is same?\n2. is same?\n3. Yes", 10) == [{"question": "Is same?", "weight": 1.0}]  # repeats, answers
    assert parse_written("A good answer is correct and short.", 10) == []  # prose: no question
    assert [q["question"] for q in parse_written("1. Is it right?\n2. Is it", 10, cut=True)] == ["Is it right?"]  # unfinished


def test_checklist_score_is_the_weighted_mean_of_the_read_answers():
    answers = [{"weight": 1.0, "p_yes": 0.8}, {"weight": 3.0, "p_yes": 0.4}, {"weight": 5.0, "p_yes": None}]
    assert checklist_score(answers) == pytest.approx((0.8 + 3 * 0.4) / 4)  # 0.5; the unread one counts nowhere
    assert checklist_score([{"weight": 1.0, "p_yes": None}]) is None
    assert checklist_score([]) is None


def test_p_yes_is_renormalised_over_yes_and_no_and_weighted(tmp_path):
    # data checklist: q1 (weight 1) P(yes)=0.3, P(no)=0.1 -> 0.75; q2 (weight 3) 0.1 vs 0.4 -> 0.2
    table = {"q1": [LN(0.3), LN(0.1)], "q2": [LN(0.1), LN(0.4)]}
    eng = ScriptedEngine(lambda *a: "", p_yes_by_question(table))
    judge = build_judge(spec(tmp_path, "data"), tmp_path, eng)
    assert isinstance(judge, ChecklistJudge)
    checklist = ["q1", {"question": "q2", "weight": 3}]
    res = score_one(judge, Sample(prompt="p", response="r", metadata={"checklist": checklist}, id="a"))
    assert [a["p_yes"] for a in res.checklist] == pytest.approx([0.75, 0.2])
    assert [(a["question"], a["weight"]) for a in res.checklist] == [("q1", 1.0), ("q2", 3.0)]
    assert res.score == res.reward == pytest.approx((0.75 + 3 * 0.2) / 4)  # 0.3375
    assert eng.calls == [] and eng.score_calls == 1  # nothing generated; both questions in one log-prob pass
    assert [r.view for r in res.samples] == [0, 1] and res.parse_failures == 0
    assert [r.candidate_logprobs[" Yes"] for r in res.samples] == pytest.approx([LN(0.3), LN(0.1)])
    # round trip through the stored form: the same answers from the stored log-probs
    again = rescore(judge, res.to_dict(), 1)
    assert again.score == pytest.approx(res.score) and again.checklist == res.checklist


def test_an_unread_question_is_left_out_and_all_unread_masks(tmp_path):
    table = {"q1": [None, LN(0.5)], "q2": [LN(0.9), LN(0.1)], "q3": [LN(0.2), float("-inf")]}
    judge = build_judge(spec(tmp_path, "data"), tmp_path, ScriptedEngine(lambda *a: "", p_yes_by_question(table)))
    some, none = judge.score_batch(
        [
            Sample(prompt="p", response="r", metadata={"checklist": ["q1", "q2"]}),
            Sample(prompt="p", response="r", metadata={"checklist": ["q1", "q3"]}),
        ]
    )
    assert some.score == pytest.approx(0.9) and some.checklist[0]["p_yes"] is None and some.parse_failures == 1
    assert none.masked and none.score is None and none.reward is None and none.parse_failures == 2
    assert "no checklist answer could be read" in none.error and "no log-prob" in none.error


def test_written_checklist_is_cached_per_prompt_across_groups_and_calls(tmp_path):
    def write(text, j, call):
        assert text.endswith("1. Is it")  # the prefill, continued
        return " right?\n2. Is it brief?\n3. Is it clear?\n4. Is it dropped?"

    table = {"Is it right?": [LN(0.9), LN(0.1)], "Is it brief?": [LN(0.5), LN(0.5)], "Is it clear?": [LN(0.1), LN(0.9)]}
    eng = ScriptedEngine(write, p_yes_by_question(table))
    judge = build_judge(spec(tmp_path, checklist={"prefill": "1. Is it"}), tmp_path, eng)

    def group(prompt, n):
        return [Sample(prompt=prompt, response=f"r{k}", id=f"{prompt}/{k}") for k in range(n)]

    out = judge.score_groups([group("A", 3), group("B", 2)])
    assert eng.calls == [(2, 1)]  # one generate call: one checklist per distinct prompt
    assert eng.score_calls == 1  # 5 responses x 3 questions (max_items) in one log-prob pass
    first = out[0][0]
    assert [a["question"] for a in first.checklist] == ["Is it right?", "Is it brief?", "Is it clear?"]
    assert first.score == pytest.approx(0.5)  # (0.9 + 0.5 + 0.1) / 3
    # the writing is recorded (view -1) and its tokens counted on the prompt's first response only
    assert [r.view for r in first.samples] == [-1, 0, 1, 2] and out[0][1].samples[0].view == 0
    assert first.tokens > 0 and out[0][1].tokens == 0
    judge.score_batch(group("A", 2) + group("C", 1))  # A again on a later step: from the cache
    assert eng.calls == [(2, 1), (1, 1)] and judge.writer.generated == 3


def test_a_checklist_that_cannot_be_written_masks_the_prompt_and_is_retried_later(tmp_path):
    eng = ScriptedEngine(
        lambda text, j, call: "A good answer is right." if call < 2 else "1. Is it right?", lambda t, c: [LN(0.6), LN(0.4)]
    )
    judge = build_judge(spec(tmp_path), tmp_path, eng)
    a, b = judge.score_batch([Sample(prompt="A", response="r0"), Sample(prompt="A", response="r1")])
    assert eng.calls == [(1, 1), (1, 1)]  # written, then once more (on_failure.retries: 1)
    assert eng.score_calls == 0  # no question to read
    assert a.masked and b.masked and a.checklist == [] and "wrote no checklist question" in a.error
    assert (a.parse_failures, b.parse_failures) == (2, 0)  # both attempts, counted on the first response
    assert [(r.view, r.attempt, r.error is not None) for r in a.samples] == [(-1, 0, True), (-1, 1, True)]
    again = score_one(judge, Sample(prompt="A", response="r0"))  # not cached: written again
    assert again.score == pytest.approx(0.6) and len(eng.calls) == 3


def test_data_checklist_missing_or_malformed_is_a_clear_error(tmp_path):
    judge = build_judge(spec(tmp_path, "data"), tmp_path, ScriptedEngine(lambda *a: ""))
    with pytest.raises(JudgeError, match=r"item x7: judge 'ck' reads the checklist from the data .* no metadata.checklist"):
        judge.score_batch(
            [Sample(prompt="p", response="r", metadata={"checklist": ["q"]}), Sample(prompt="p", response="r", id="x7")]
        )
    with pytest.raises(JudgeError, match=r"item 0: metadata.checklist item 1: 'weight' must be a number above 0"):
        score_one(judge, Sample(prompt="p", response="r", metadata={"checklist": ["q", {"question": "q2", "weight": 0}]}))


def test_a_data_checklist_longer_than_max_items_is_refused_naming_the_item_never_cut(tmp_path):
    """#18: max_items used to size only the deadline; the data's 3 questions were all asked of a judge
    whose deadline allowed for 2."""
    eng = ScriptedEngine(lambda *a: "", p_yes_by_question({"q1": [LN(0.9), LN(0.1)], "q2": [LN(0.5), LN(0.5)]}))
    judge = build_judge(spec(tmp_path, "data", checklist={"max_items": 2}), tmp_path, eng)
    with pytest.raises(
        JudgeError, match=r"item x3: metadata.checklist: 3 questions, more than judge 'ck' asks \(its checklist.max_items is 2\)"
    ):
        score_one(judge, Sample(prompt="p", response="r", id="x3", metadata={"checklist": ["q1", "q2", "q3"]}))
    assert eng.score_calls == 0  # refused before any reading
    fits = score_one(judge, Sample(prompt="p", response="r", metadata={"checklist": ["q1", "q2"]}))
    assert fits.score == pytest.approx(0.7) and [a["question"] for a in fits.checklist] == ["q1", "q2"]


def test_render_shows_the_writing_and_one_prompt_per_question(tmp_path):
    s = Sample(prompt="What?", response="That.", metadata={"checklist": ["q1", "q2"]})
    written = render(build_judge(spec(tmp_path), tmp_path, ScriptedEngine(lambda *a: "")), s)
    assert [st["stage"] for st in written] == ["checklist", "judge"]
    assert "Write a checklist for: What?" in written[0]["request"].messages[-1]["content"]
    assert "Question: <a question" in written[1]["request"].messages[0]["content"]
    data = render(build_judge(spec(tmp_path, "data"), tmp_path, ScriptedEngine(lambda *a: "")), s)
    assert [(st["stage"], st["view"], st["question"]) for st in data] == [("judge", 0, "q1"), ("judge", 1, "q2")]
    assert data[1]["request"].messages[-1] == {"role": "assistant", "content": "Verdict:"}  # the prefill, continued


@pytest.mark.parametrize(
    "change, message",
    [
        ({"checklist": None}, "mode 'checklist' needs checklist: {source: data}"),
        ({"parser": {"type": "regex"}}, "reads each answer as P\\(yes\\) from log-probs, not with a 'regex' parser"),
        ({"parser": {"type": "logprob", "candidates": ["Y", "N", "?"]}}, "a checklist judge reads exactly two, \\[yes, no\\]"),
        ({"checklist": {"source": "model"}}, "source 'model' needs template"),
        ({"checklist": {"source": "data", "template": "w.j2"}}, "template and prefill are for source 'model'"),
        ({"checklist": {"source": "model", "template": "w.j2", "sampling": {"n": 2}}}, "a prompt gets one checklist"),
        ({"principles": {"template": "w.j2"}}, "principles is not for checklist judges"),
        ({"mode": "pointwise"}, "checklist is for mode 'checklist' \\(mode is 'pointwise'\\)"),
    ],
)
def test_spec_validation_says_what_is_wrong(tmp_path, change, message):
    good = spec(tmp_path, "data").model_dump()
    good["checklist"] = {"source": "data"}
    with pytest.raises(ValidationError, match=message):
        JudgeSpec(**{**good, **change})


def test_limits_count_a_prompt_per_question_and_the_writing(tmp_path):
    s = spec(tmp_path)  # max_items 3, written: 3 readings + 1 writing; no critique: only the writing's tokens
    assert prompts_per_sample(s) == 4
    assert tokens_per_sample(s) == 2 * 160  # (1 + retries) x checklist.sampling.max_new_tokens
    assert prompts_per_sample(spec(tmp_path, "data", checklist={"max_items": 5})) == 5


def test_a_checklist_spec_error_names_the_file_and_line(tmp_path):
    from grm.config import ConfigError, load_judge

    (tmp_path / "q.j2").write_text("{# expects: response, question #}{{ response }} {{ question }}")
    path = tmp_path / "ck.yaml"
    path.write_text("name: ck\nmode: checklist\nmodel: m\ntemplate: q.j2\nchecklist:\n  source: model\nparser: {type: logprob}\n")
    with pytest.raises(ConfigError, match=r"ck.yaml:5: checklist: source 'model' needs template"):
        load_judge(path)


def test_an_item_passed_by_no_counts_p_no():
    answers = [
        {"question": "Does it use the word 'very'?", "weight": 1.0, "pass_if": "no", "p_yes": 0.2},
        {"question": "Does it have a title?", "weight": 3.0, "p_yes": 0.6},
    ]
    assert checklist_score(answers) == pytest.approx((1.0 * 0.8 + 3.0 * 0.6) / 4.0)
    assert checklist_score([{**answers[0], "p_yes": None}]) is None
