"""A NaN or infinite number is never a score or a reward: whatever judge produced it (an
environment's signal, a sum of huge parsed scores, a margin) the result is masked and counted
(``grm.judges.base.finish``, which every judge's results pass through), and ``grm judge try --json``
prints strict JSON."""

import json
import math
from pathlib import Path

import pytest

from grm.config import JudgeSpec
from grm.judges import Sample, build_judge
from grm.judges.base import mask_non_finite, score_one
from grm.judges.runtime import load
from grm.judges.sample_file import read_samples
from grm.judges.types import JudgeResult, SampleRecord
from tests.unit.fuzz.support import run_cli
from tests.unit.judges.fake_engine import ScriptedEngine

FIXTURE = Path(__file__).parents[3] / "judges" / "fixtures" / "env-success.json"


def _strict(text: str):
    def refuse(name):
        raise AssertionError(f"{name} in --json output: not JSON")

    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize("signal", [math.nan, math.inf, -math.inf])
def test_a_non_finite_environment_signal_is_masked_and_counted(signal):
    [s] = read_samples(str(FIXTURE))
    s.trajectory.signals["success"] = signal
    r = score_one(load("builtin:env-success"), s)
    assert r.score is None and r.reward is None and r.masked
    assert r.parse_failures == 1 and "not a finite number" in r.error
    assert r.samples[0].parsed is None


def test_try_json_prints_strict_json_for_a_nan_signal(tmp_path):
    d = json.loads(FIXTURE.read_text())
    d["trajectory"]["signals"]["success"] = None  # a NaN signal as json_safe wrote it
    p = tmp_path / "sig.json"
    p.write_text(json.dumps(d))
    res = run_cli("judge", "try", "builtin:env-success", "--json", "--sample", str(p))
    assert res.code == 0, res.err
    [r] = _strict(res.out)
    assert r["score"] is None and r["reward"] is None and r["masked"] is True and r["parse_failures"] == 1


def as_number(text: str) -> float:
    """A user's parser (``target``): the critique's last word as a number."""
    return float(text.split()[-1])


def test_a_mean_of_huge_margins_that_overflows_is_masked(tmp_path):
    (tmp_path / "t.j2").write_text("{# expects: prompt, responses #}{{ prompt }} {{ responses[0] }} {{ responses[1] }}")
    spec = JudgeSpec(
        name="j",
        mode="pairwise",
        model="m",
        template="t.j2",
        sampling={"n": 2},
        position={"swap": False},
        parser={"type": "target", "target": f"{__name__}:as_number"},
    )
    judge = build_judge(spec, tmp_path, ScriptedEngine(lambda p, j, c: "margin 1.5e308"))
    r = score_one(judge, Sample(prompt="p", responses=["a", "b"]))  # (1.5e308 + 1.5e308) / 2 is inf in floats
    assert r.score is None and r.margin is None and r.verdict is None and r.parse_failures == 1
    assert "non-finite margin" in r.error


def test_every_number_a_result_hands_on_is_checked():
    for field, value in [
        ("margin", math.inf),
        ("scores", [1.0, math.nan]),
        ("rewards", [math.inf]),
        ("details", {"x": math.nan}),
    ]:
        r = JudgeResult(judge="j", score=1.0, reward=1.0, verdict="1", **{field: value})
        mask_non_finite(r)
        assert r.masked and r.verdict is None and r.parse_failures == 1 and field in r.error, field
    r = JudgeResult(judge="j", score=0.5, reward=0.5)
    r.samples = [SampleRecord(view=0, order=[0], index=0, attempt=0, text="", parsed=math.nan, error=None, tokens=0)]
    mask_non_finite(r)
    assert r.masked and r.samples[0].parsed is None and "non-finite" in r.samples[0].error
    fine = JudgeResult(judge="j", score=0.5, reward=0.5, margin=2.0)
    mask_non_finite(fine)
    assert fine.score == 0.5 and fine.parse_failures == 0 and fine.error is None
