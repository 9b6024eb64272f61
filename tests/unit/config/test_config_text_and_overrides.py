"""Every string a config holds is valid Unicode, and ``KEY.PATH=VALUE`` overrides reach the fields
of whichever member of a ``type``-chosen union the spec holds."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from grm.config import ConfigError, JudgeSpec, load, load_judge
from grm.config.env import EnvSpec
from tests.conftest import ROOT
from tests.unit.fuzz.support import assert_clean_failure, budget, fresh, run_cli

TEMPLATE = "{# expects: prompt, response #}{{ prompt }} {{ response }}"
RULE = "name: x\nmode: rule\nrule: {type: length, target_tokens: 5}\n"
MODEL = "name: x\nmodel: m\ntemplate: t.j2\nparser: {range: [1, 10]}\n"
SAMPLE = '{"prompt": "p", "response": "r"}'
QUICKSTART = ROOT / "pipelines" / "quickstart.yaml"


def _files(tmp_path: Path) -> tuple[Path, Path]:
    (tmp_path / "t.j2").write_text(TEMPLATE)
    j = tmp_path / "j.yaml"
    j.write_text(MODEL)
    s = tmp_path / "s.json"
    s.write_text(SAMPLE)
    return j, s


# ------------------------------------------------------------------------------ lone surrogates

# Where a spec holds text: top-level strings, nested ones, list items, a mapping's keys and values.
PLACES = {
    "description": (RULE + 'description: "@S@"\n', "description"),
    "system": (MODEL + 'system: "@S@"\n', "system"),
    "prefill": (MODEL + 'prefill: "@S@"\n', "prefill"),
    "example output": (RULE + 'examples: [{output: "@S@", expect: null}]\n', "examples.0.output"),
    "stop string": (MODEL + 'sampling: {stop: ["@S@"]}\n', "sampling.stop"),
    "target option value": (
        "name: x\nmode: pairwise\nmodel: m\ntemplate: t.j2\nparser: {type: target, target: 'mine:f', options: {k: \"@S@\"}}\n",
        "parser",
    ),
    "target option key": (
        "name: x\nmode: pairwise\nmodel: m\ntemplate: t.j2\nparser: {type: target, target: 'mine:f', options: {\"@S@\": 1}}\n",
        "parser",
    ),
    "top-level key": (RULE + '"@S@": 1\n', ":4: key"),
    "nested key": (RULE + 'examples: [{output: a, expect: null, "@S@": 1}]\n', ":4: examples.0: key"),
    "verdict token": (RULE.replace("length, target_tokens: 5", 'verdict, verdict: {a: "[[@S@]]"}'), "rule"),
}


@settings(max_examples=budget(30), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    place=st.sampled_from(sorted(PLACES)),
    code=st.integers(0xD800, 0xDFFF),
    around=st.tuples(st.text("ab ", max_size=3), st.text("ab ", max_size=3)),
)
def test_a_lone_surrogate_anywhere_in_a_spec_is_refused_at_load_naming_file_line_and_field(tmp_path, place, code, around):
    (tmp_path / "t.j2").write_text(TEMPLATE)
    text, field = PLACES[place]
    f = fresh(tmp_path, ".yaml")
    f.write_text(text.replace("@S@", f"{around[0]}\\u{code:04x}{around[1]}"))  # YAML's escape: the file itself is UTF-8
    with pytest.raises(ConfigError) as e:
        load(f)
    msg = str(e.value)
    assert msg.startswith(f"{f}:") and field in msg and "lone surrogate" in msg, msg
    res = run_cli("validate", str(f))  # the command: one line, no traceback (it hashed the spec before)
    assert_clean_failure(res, f)


def test_a_non_utf8_byte_in_an_override_value_or_key_is_refused_naming_the_override(tmp_path):
    j, s = _files(tmp_path)
    bad = os.fsdecode(b"\xff")  # what the command line hands Python for a byte that is not UTF-8
    for argv in (
        ("judge", "render", str(j), "--sample", str(s), f"system={bad}"),
        ("judge", "try", str(j), "--sample", str(s), f"prefill=x{bad}"),
        ("validate", str(j), "--set", f"sampling.stop=[a, '{bad}']"),
        ("judge", "render", str(j), "--sample", str(s), f"{bad}=1"),
    ):
        res = run_cli(*argv)
        assert_clean_failure(res, j, or_names="override")
        assert "override" in res.err and "\\udcff" in res.err, res.err


def test_recorded_or_hand_built_specs_are_checked_too():
    # the check lives in the models: a spec read back from a results file meets it as well
    with pytest.raises(ValidationError, match="lone surrogate"):
        JudgeSpec.model_validate(
            {"name": "x", "mode": "rule", "rule": {"type": "length", "target_tokens": 5}, "system": "\ud800"}
        )
    with pytest.raises(ValidationError, match="key .* lone surrogate"):
        EnvSpec.model_validate({"type": "calc", "kwargs": {"\udcff": 1}})


# ------------------------------------------------------------------------------ union overrides


def test_overrides_reach_the_fields_of_the_parser_a_builtin_judge_holds(tmp_path):
    spec = load_judge(
        "builtin:pointwise-logprob", overrides=["parser.prefix=x", "parser.critique=false", "parser.candidates=['1', '2']"]
    )
    assert (spec.parser.prefix, spec.parser.critique, spec.parser.candidates) == ("x", False, ["1", "2"])
    s = tmp_path / "s.json"
    s.write_text(SAMPLE)
    assert run_cli("judge", "render", "builtin:pointwise-logprob", "--sample", str(s), "parser.prefix=x").code == 0


def test_an_override_setting_the_type_selects_the_member_in_either_order(tmp_path):
    j, _ = _files(tmp_path)
    for order in (["parser.type=logprob", "parser.prefix=x"], ["parser.prefix=x", "parser.type=logprob"]):
        assert load(j, order).parser.prefix == "x"
    assert load(j, ["parser={type: logprob}", "parser.critique=false"]).parser.critique is False
    with pytest.raises(ConfigError, match=r"unknown key 'parser.prefx'; did you mean 'parser.prefix'"):
        load(j, ["parser.type=logprob", "parser.prefx=x"])
    with pytest.raises(ConfigError, match=r"unknown key 'parser.prefix'"):  # the regex parser has none
        load(j, ["parser.prefix=x"])


def test_overrides_reach_engine_and_algorithm_members(tmp_path):
    j, _ = _files(tmp_path)
    spec = load(j, ["engine.type=openai", "engine.base_url=http://127.0.0.1:1/v1", "engine.timeout_s=5"])
    assert spec.engine.timeout_s == 5
    oa = tmp_path / "oa.yaml"
    oa.write_text(MODEL + "engine: {type: openai, base_url: 'http://127.0.0.1:1/v1'}\n")
    assert load(oa, ["engine.top_logprobs=5"]).engine.top_logprobs == 5
    spec = load(QUICKSTART, ["algorithm.type=ppo", "algorithm.lam=0.5"], kind="pipeline")
    assert spec.algorithm.lam == 0.5
    with pytest.raises(ConfigError, match=r"unknown key 'algorithm.lam'"):  # grpo has no lam
        load(QUICKSTART, ["algorithm.lam=0.5"], kind="pipeline")


def test_a_check_of_a_whole_union_member_names_the_field_not_the_tag(tmp_path):
    f = tmp_path / "v.yaml"
    f.write_text("name: v\nmode: pairwise\nmodel: m\ntemplate: t.j2\nparser: {type: verdict, a: '', b: '[[B]]'}\n")
    (tmp_path / "t.j2").write_text(TEMPLATE)
    with pytest.raises(ConfigError) as e:
        load(f)
    assert str(e.value).startswith(f"{f}:5: parser: a: ") and "verdict:" not in str(e.value)
