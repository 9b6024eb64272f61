"""SPCT principles stage: one set of principles per item, shared by the item's critiques.

``principles.sampling.n: 2`` used to validate, then the sampler read the engine's 2 generations per
request as one per item and indexed past the batch (IndexError). It is refused when the spec loads.
"""

import pytest

from grm.config import ConfigError, JudgeSpec, load
from grm.config.sampling import JudgeSampling
from grm.judges import Sample, build_judge
from tests.unit.judges.fake_engine import ScriptedEngine

PRINCIPLES = "{# expects: prompt #}principles for {{ prompt }}"
JUDGE = "{# expects: prompt, responses, principles #}[{{ principles }}] A={{ responses[0] }} B={{ responses[1] }}"


def _files(tmp_path):
    (tmp_path / "pr.j2").write_text(PRINCIPLES)
    (tmp_path / "t.j2").write_text(JUDGE)


def _reply(prompt: str, j: int, call: int) -> str:
    if prompt.startswith("principles for "):
        return f"RUBRIC-{prompt.removeprefix('principles for ')}"
    return "[[A]]"


def test_principles_sampling_n_above_one_is_refused_naming_file_line_and_field(tmp_path):
    _files(tmp_path)
    f = tmp_path / "j.yaml"
    f.write_text(
        "name: p\nmode: pairwise\nmodel: m\ntemplate: t.j2\nparser: {type: verdict}\n"
        "principles:\n  template: pr.j2\n  sampling: {n: 2, temperature: 0.7}\n"
    )
    with pytest.raises(ConfigError) as e:
        load(f)
    assert f"{f}:8: principles.sampling: n is 2" in str(e.value)
    assert "raise the judge's own sampling.n" in str(e.value)
    with pytest.raises(ConfigError, match=r"j.yaml:8 \(with override 'principles.sampling.n=3'\): principles.sampling: n is 3"):
        load(f, ["principles.sampling.n=3"])
    assert load(f, ["principles.sampling.n=1"]).principles.sampling.n == 1


def test_each_item_gets_its_own_principles_in_every_critique_and_order(tmp_path):
    _files(tmp_path)
    spec = JudgeSpec(
        name="p",
        mode="pairwise",
        model="m",
        template="t.j2",
        parser={"type": "verdict"},
        position={"swap": True},
        sampling={"n": 3, "temperature": 0.7},
        principles={"template": "pr.j2"},
    )
    eng = ScriptedEngine(_reply)
    items = [Sample(prompt=f"q{i}", responses=[f"a{i}", f"b{i}"]) for i in range(3)]
    res = build_judge(spec, tmp_path, eng).score_batch(items)
    # one principles call (one per item), then 3 items x 2 orders critiqued 3 times each
    assert eng.calls == [(3, 1), (6, 3)]
    assert [r.principles for r in res] == ["RUBRIC-q0", "RUBRIC-q1", "RUBRIC-q2"]
    judged = eng.prompts[3:]
    for i in range(3):
        mine = [p for p in judged if f"a{i}" in p]
        assert len(mine) == 2 and all(p.startswith(f"[RUBRIC-q{i}]") for p in mine)
    assert all(len(r.samples) == 6 and r.parse_failures == 0 for r in res)


def test_the_sampler_asks_one_set_per_item_even_from_an_unvalidated_spec(tmp_path):
    """A spec built without validation (``model_copy``) still gets one set per item, not an IndexError."""
    _files(tmp_path)
    spec = JudgeSpec(
        name="p", mode="pairwise", model="m", template="t.j2", parser={"type": "verdict"}, principles={"template": "pr.j2"}
    )
    three = JudgeSampling.model_construct(**{**JudgeSampling().model_dump(), "n": 3})
    spec = spec.model_copy(update={"principles": spec.principles.model_copy(update={"sampling": three})})
    eng = ScriptedEngine(_reply)
    res = build_judge(spec, tmp_path, eng).score_batch([Sample(prompt=f"q{i}", responses=["x", "y"]) for i in range(2)])
    assert eng.calls[0] == (2, 1)
    assert [r.principles for r in res] == ["RUBRIC-q0", "RUBRIC-q1"]
