"""``sampling.stop_at_score``: a critique ends once the judge's parser reads a score that two more
characters do not change (the hf engine checks it after every token, ``test_hf_engine.py``). Here:
when the check holds, that the sampler passes it to the engine, where the spec allows it, and that
specs without it keep their hash."""

import pytest
from pydantic import ValidationError

from grm.config.judge import JudgeSpec
from grm.judges import build_judge
from grm.judges.types import Sample
from tests.unit.judges.fake_engine import ScriptedEngine
from tests.unit.judges.test_guard import pairwise, pointwise


def test_a_score_is_settled_once_text_follows_it(tmp_path):
    sampler = build_judge(pointwise(tmp_path, sampling={"stop_at_score": True}), tmp_path, ScriptedEngine(None)).sampler
    settled = sampler.score_settled
    assert not settled("Fine. Score: 1")  # "10" may follow
    assert not settled("Fine. Score: 10")
    assert not settled("Fine. Score: 10\n")
    assert settled("Fine. Score: 10\nOk")
    assert not settled("Fine. Score: 11\nOk")  # out of range: no score read, the critique goes on
    assert not settled("No score yet, just words")


def test_a_verdict_is_settled_once_closed_and_followed(tmp_path):
    sampler = build_judge(pairwise(tmp_path, sampling={"stop_at_score": True}), tmp_path, ScriptedEngine(None)).sampler
    assert not sampler.score_settled("A is better: [[A")
    assert not sampler.score_settled("A is better: [[A]]")
    assert sampler.score_settled("A is better: [[A]] because")


def test_the_sampler_hands_the_check_to_the_engine_only_when_asked(tmp_path):
    seen = []

    class Recording(ScriptedEngine):
        def generate(self, requests, sampling):
            seen.append(sampling.stop_when)
            return super().generate(requests, sampling)

    for on in (True, False):
        judge = build_judge(
            pointwise(tmp_path, sampling={"stop_at_score": on}), tmp_path, Recording(lambda *_: "Ok. Score: 7\nx")
        )
        (result,) = judge.score_batch([Sample(prompt="q", response="r")])
        assert result.score == 7
    assert seen[0] is not None and seen[0]("Ok. Score: 7\nx") and seen[1] is None


def test_stop_at_score_is_refused_where_no_first_score_exists(tmp_path):
    (tmp_path / "t.j2").write_text("{# expects: prompt, response #}{{ prompt }} {{ response }}")
    base = {"name": "j", "mode": "pointwise", "model": "m", "template": "t.j2", "sampling": {"stop_at_score": True}}
    with pytest.raises(ValidationError, match="stop_at_score"):
        JudgeSpec(**base, parser={"type": "logprob"})
    with pytest.raises(ValidationError, match="stop_at_score"):
        JudgeSpec(**{**base, "mode": "listwise"}, parser={"type": "boxed", "range": [1, 10]})
    JudgeSpec(**base, parser={"type": "regex", "range": [1, 10]})  # a text parser: allowed


def test_specs_without_it_keep_their_hash(tmp_path):
    plain = build_judge(pointwise(tmp_path), tmp_path, ScriptedEngine(None))
    assert plain.spec_hash == "092356978deb3d3f"  # as before the option existed
    stopping = build_judge(pointwise(tmp_path, sampling={"stop_at_score": True}), tmp_path, ScriptedEngine(None))
    assert stopping.spec_hash != plain.spec_hash
