"""Every judge mode behind one interface: the registry, and ``score_groups`` (what the training
orchestrator calls for every mode) with a scripted engine."""

import re
import typing

import pytest

from grm.config import JudgeSpec
from grm.config.parsers import LogprobParser, ParserSpec
from grm.judges import JudgeError, Sample, build_judge
from grm.judges.base import Judge, score_one
from grm.judges.checklist import ChecklistJudge
from grm.judges.listwise import ListwiseMode, as_list, ungroup
from grm.judges.model import JudgeMode, ModelJudge
from grm.judges.pairwise import PairwiseMode
from grm.judges.parsers import PARSERS, build_parser
from grm.judges.pointwise import PointwiseMode
from grm.judges.rule import RuleJudge
from grm.judges.runtime import JUDGES, load_engine
from grm.judges.views import Mode
from tests.unit.judges.fake_engine import ScriptedEngine


def pointwise_spec(tmp_path, **kw):
    (tmp_path / "t.j2").write_text("{# expects: prompt, response #}Q: {{ prompt }}\nA: {{ response }}\nEnd with Score: <n>")
    return JudgeSpec(name="pw", mode="pointwise", model="m", template="t.j2", parser={"type": "regex", "range": (0, 10)}, **kw)


def listwise_spec(tmp_path, **kw):
    (tmp_path / "l.j2").write_text(
        "{# expects: prompt, responses #}{{ prompt }}{% for r in responses %}[{{ r }}]{% endfor %} \\boxed{}"
    )
    return JudgeSpec(name="lw", mode="listwise", model="m", template="l.j2", parser={"type": "boxed", "range": (0, 10)}, **kw)


def group(prompt, responses, reference=None):
    return [Sample(prompt=prompt, response=r, reference=reference, id=f"{prompt}:{k}") for k, r in enumerate(responses)]


def test_registry_builds_the_judge_for_every_mode(tmp_path):
    (tmp_path / "p.j2").write_text("{# expects: prompt, responses #}A: {{ responses[0] }} B: {{ responses[1] }}")
    specs = {
        "pointwise": pointwise_spec(tmp_path),
        "pairwise": JudgeSpec(name="pair", mode="pairwise", model="m", template="p.j2", parser={"type": "verdict"}),
        "listwise": listwise_spec(tmp_path),
        "checklist": JudgeSpec(
            name="ck", mode="checklist", model="m", template="p.j2", checklist={"source": "data"}, parser={"type": "logprob"}
        ),
        "rule": JudgeSpec(name="r", mode="rule", rule={"type": "numeric-answer"}),
    }
    # a model judge is a ModelJudge around the mode's class; a rule judge is its own class
    expected = {
        "pointwise": PointwiseMode,
        "pairwise": PairwiseMode,
        "listwise": ListwiseMode,
        "checklist": ChecklistJudge,
        "rule": RuleJudge,
    }
    # every mode a spec may name has a judge, and nothing sits in the registry for a mode nobody can name
    assert set(JUDGES) == set(typing.get_args(JudgeSpec.model_fields["mode"].annotation)) == set(expected)
    members = [m for m in vars(Judge) if not m.startswith("_")] + list(typing.get_type_hints(Judge))
    mode_members = [m for p in (Mode, JudgeMode) for m in vars(p) if not m.startswith("_")]
    for mode, spec in specs.items():
        judge = build_judge(spec, tmp_path, ScriptedEngine(lambda *a: ""))
        if isinstance(judge, ModelJudge):
            assert type(judge.mode) is expected[mode]
            assert [m for m in mode_members if not hasattr(judge.mode, m)] == []
        else:
            assert type(judge) is expected[mode]
        assert judge.spec is spec and judge.base_dir == tmp_path
        missing = [m for m in members if not (hasattr(type(judge), m) or m in vars(judge))]
        assert missing == [], f"{type(judge).__name__} lacks {missing}"
    assert load_engine(build_judge(specs["rule"])) is None  # a rule verifier has no model


def test_judge_protocol_is_what_callers_use():
    # score_batch, score_groups, the spec (and where it was read), its hash and its cost: rendering,
    # rescoring, normalising and provenance are functions over the spec, not members every class restates
    members = {m for m in vars(Judge) if not m.startswith("_")} | set(typing.get_type_hints(Judge))
    assert members == {"score_batch", "score_groups", "spec", "base_dir", "spec_hash", "cost"}


def test_pointwise_score_groups_keeps_group_order_and_masks(tmp_path, monkeypatch):
    # the judge scores the digit in the response; "silence" never parses (no retries): masked
    def reply(p, j, c):
        m = re.search(r"A: r(\d)", p)
        return f"Score: {m.group(1)}" if m else "I cannot judge this"

    eng = ScriptedEngine(reply)
    judge = build_judge(pointwise_spec(tmp_path, on_failure={"retries": 0}), tmp_path, eng)
    out = judge.score_groups([group("a", ["r3", "r1"]), group("b", ["r9", "silence", "r0"]), group("c", ["r5"])])
    assert eng.calls == [(6, 1)]  # every response of every group: one batch
    assert [[r.score for r in g] for g in out] == [[3.0, 1.0], [9.0, None, 0.0], [5.0]]
    masked = out[1][1]
    assert masked is not None and masked.masked and masked.reward is None and masked.parse_failures == 1
    assert out[1][2].reward == 0.0 and out[0][0].reward == pytest.approx(0.3)
    assert judge.score_groups([[], []]) == [[], []] and len(eng.calls) == 1  # nothing to judge: no call

    def no_model(*a):
        raise AssertionError("an empty step loaded the judge model")

    monkeypatch.setattr("grm.judges.engine_slot.shared_engine", no_model)
    assert build_judge(pointwise_spec(tmp_path), tmp_path).score_groups([[]]) == [[]]


@pytest.mark.parametrize("shuffle", [False, True])
def test_listwise_score_groups_maps_scores_back_to_responses(tmp_path, shuffle):
    def reply(p, j, c):  # a perfect judge: the score is the number written in the response
        return "\\boxed{" + ", ".join(re.findall(r"\[(\d+)\]", p)) + "}"

    eng = ScriptedEngine(reply)
    spec = listwise_spec(tmp_path, sampling={"n": 3}, position={"shuffle": shuffle})
    judge = build_judge(spec, tmp_path, eng)
    out = judge.score_groups([group("a", ["2", "7", "4"], reference="ref-a"), [], group("b", ["9", "1"])])
    assert eng.calls == ([(6, 1)] if shuffle else [(2, 3)])  # one call for both groups
    assert [[r.score for r in g] for g in out] == [[2.0, 7.0, 4.0], [], [9.0, 1.0]]
    assert [r.reward for r in out[2]] == pytest.approx([0.9, 0.1])
    assert all(r.scores == [2.0, 7.0, 4.0] for r in out[0])  # each copy still carries the whole list
    orders = {tuple(s.order) for s in out[0][0].samples}
    assert (len(orders) > 1) == shuffle  # shuffled views really saw other orders
    assert eng.prompts[0].startswith("a[") and eng.prompts[-1].startswith("b[")  # prompt taken from the group


def test_listwise_group_sample_and_failed_group(tmp_path):
    g = group("q", ["x", "y"], reference="42")
    s = as_list(g)
    assert (s.prompt, s.responses, s.reference, s.id) == ("q", ["x", "y"], "42", "q:0/group")
    assert ungroup(None, 3) == [None, None, None]
    judge = build_judge(listwise_spec(tmp_path, on_failure={"retries": 0}), tmp_path, ScriptedEngine(lambda *a: "no list"))
    ((a, b),) = judge.score_groups([g])
    assert a is not None and b is not None
    assert a.masked and b.masked and a.score is None and a.reward is None
    assert (a.parse_failures, b.parse_failures) == (1, 0)  # one failed critique, counted once per group
    with pytest.raises(JudgeError, match="at least 2"):
        judge.score_groups([group("q", ["alone"])])


def test_rule_score_groups_numeric_answer():
    judge = build_judge(JudgeSpec(name="math", mode="rule", rule={"type": "numeric-answer"}))
    out = judge.score_groups(
        [group("a", ["so it is 12", "The answer is 13", "no idea"], reference="12"), group("b", ["#### 7", "7"])]
    )  # no reference: nothing verified
    assert [[r.score for r in g] for g in out] == [[1.0, 0.0, 0.0], [None, None]]
    assert out[1][0].masked and out[1][0].error == "no reference answer to compare with"
    assert out[0][1].samples[0].text == "answer 13 != reference 12"


def word(text):
    return "excellent"


def test_a_word_where_a_score_belongs_is_a_failure(tmp_path):
    pointwise_spec(tmp_path)
    spec = JudgeSpec(
        name="t",
        mode="pointwise",
        model="m",
        template="t.j2",
        on_failure={"retries": 0},
        parser={"type": "target", "target": "tests.unit.judges.test_judge_modes:word", "range": [1, 10]},
    )
    r = score_one(build_judge(spec, tmp_path, ScriptedEngine(lambda *a: "fine")), Sample(prompt="q", response="r"))
    assert r.masked and r.parse_failures == 1 and "returned 'excellent'; expected a finite number" in r.samples[0].error


def test_parser_registry_covers_every_text_parser():
    types = {typing.get_args(c.model_fields["type"].annotation)[0] for c in typing.get_args(typing.get_args(ParserSpec)[0])}
    assert set(PARSERS) == types - {"logprob"}
    with pytest.raises(JudgeError, match="reads token probabilities"):
        build_parser(LogprobParser())
