"""``grm rescore`` reads a stored checklist result as data: its weights are checked as a data row's
are (one JudgeError, never a TypeError or a NaN score), and a question that passes on "No" keeps
that on the re-read."""

import math

import pytest

from grm.judges import Sample, build_judge
from grm.judges.base import score_one
from grm.judges.errors import JudgeError
from grm.judges.rescore import rescore
from tests.unit.judges.fake_engine import ScriptedEngine
from tests.unit.judges.test_checklist import LN, p_yes_by_question, spec


def _stored(tmp_path):
    table = {"q1": [LN(0.3), LN(0.1)], "q2": [LN(0.1), LN(0.4)]}
    judge = build_judge(spec(tmp_path, "data"), tmp_path, ScriptedEngine(lambda *a: "", p_yes_by_question(table)))
    checklist = ["q1", {"question": "q2", "weight": 3, "pass_if": "no"}]
    res = score_one(judge, Sample(prompt="p", response="r", metadata={"checklist": checklist}))
    return judge, res


def test_a_rescored_checklist_keeps_its_pass_if_no_items(tmp_path):
    judge, res = _stored(tmp_path)
    again = rescore(judge, res.to_dict(), 1)
    assert again.checklist == res.checklist and again.score == pytest.approx(res.score)


@pytest.mark.parametrize("weight", ["3", None, math.nan, -1, 10**400, True])
def test_a_stored_checklist_with_a_bad_weight_is_refused_in_one_line(tmp_path, weight):
    judge, res = _stored(tmp_path)
    stored = res.to_dict()
    stored["checklist"][1]["weight"] = weight
    with pytest.raises(JudgeError, match="stored result's checklist"):
        rescore(judge, stored, 1)
