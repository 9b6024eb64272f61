"""Every kind of broken YAML gets one clear message naming file and line, exit non-zero, no traceback."""

import pytest

from tests.conftest import ROOT, run_grm
from tests.unit.fuzz.support import assert_clean_failure, run_cli

GOOD = "name: x\nmodel: smollm2-135m-instruct\n"

CASES = {
    "unknown_key": (b"name: x\nmodel: m\nenigne: {type: hf}\n", ":3:", "did you mean 'engine'"),
    "wrong_type": (b"name: x\nmodel: m\ngeneration:\n  max_new_tokens: lots\n", ":4:", "generation.max_new_tokens"),
    "missing_field": (b"name: x\ngeneration: {}\n", ":1:", "model: required field is missing"),
    "bad_indentation": (b"name: x\nmodel: m\n  generation: 3\n", ":3:", "invalid YAML"),
    "tab_characters": (b"name: x\nmodel: m\ngeneration:\n\tmax_new_tokens: 3\n", ":4:", "tab character"),
    "empty_file": (b"", ":1:", "empty"),
    "non_mapping": (b"- a\n- b\n", ":1:", "must be a mapping"),
    "missing_file": (b"name: x\nmode: pointwise\nmodel: m\ntemplate: nope.j2\n", ":4:", "file not found"),
    "non_utf8": (b"name: x\nmodel: caf\xe9\n", ":2:", "not valid UTF-8"),
    "duplicate_key": (b"name: x\nmodel: m\nname: y\n", ":3:", "duplicate key"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_broken_yaml_clear_message(tmp_path, case):
    content, line, needle = CASES[case]
    f = tmp_path / f"{case}.yaml"
    f.write_bytes(content)
    r = run_grm("validate", str(f))
    assert r.returncode != 0
    assert "Traceback" not in r.stderr
    msg = r.stderr.strip()
    assert f"{f}{line}" in msg, msg
    assert needle in msg, msg


def test_bad_override_names_override(tmp_path):
    f = tmp_path / "ok.yaml"
    f.write_text(GOOD)
    r = run_grm("validate", str(f), "--set", "generation.max_new_tokens=abc")
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert "override 'generation.max_new_tokens=abc'" in r.stderr
    r = run_grm("validate", str(f), "--set", "generation.max_new_tokns=3")
    assert r.returncode != 0 and "did you mean 'generation.max_new_tokens'" in r.stderr
    r = run_grm("validate", str(f), "--set", "generation.max_new_tokens=7")
    assert r.returncode == 0, r.stderr


# Found by the fuzzers (tests/unit/fuzz), pinned as plain examples: each was a traceback or a silent
# default before its fix.
QUICKSTART = ROOT / "pipelines" / "quickstart.yaml"
POLICY = "name: x\nmodel: m\n"


@pytest.mark.parametrize(
    "text,needle",
    [
        (POLICY + "0x1F: 1\n", ":3: 31: Keys should be strings"),  # a YAML 1.1 int key: was int('0x1F')
        (POLICY + "1:30: 1\n", ":3: unknown key '1:30'"),  # YAML 1.1's base 60 is not read: the key is the text written
        (POLICY + "1: 1\n", ":3: 1: Keys should be strings"),
        (POLICY + "? [a]\n: 1\n", ":3: invalid YAML: found unhashable key"),  # was TypeError
        (POLICY + "x: " + "[" * 3000 + "]" * 3000 + "\n", ":3: nested more than 64 levels deep"),  # was RecursionError
        (POLICY + "seed: !!int x\n", ":3: invalid YAML: cannot read 'x' as int"),  # was ValueError
        (POLICY + "d: 2001-13-45\n", ":3: invalid YAML: cannot read '2001-13-45' as timestamp"),
        (POLICY + "d: !!bool maybe\n", ":3: invalid YAML: cannot read 'maybe' as bool"),  # was KeyError
        (POLICY + "d: !!timestamp x\n", ":3: invalid YAML: cannot read 'x' as timestamp"),  # was AttributeError
        (POLICY + "generation: {temperature: .nan}\n", ":3: generation.temperature: Input should be a finite number"),
        ("name: t\nmode: rule\nrule: {type: numeric-answer, tolerance: .nan}\n", "rule.tolerance: Input should be a finite"),
        (POLICY + "x: 1\x07\n", ":3: invalid YAML: control character U+0007"),
        (  # normalising over [3, 3] divided by zero; [10, 1] failed every parse
            "name: t\nmodel: m\ntemplate: builtin:helpfulness-pointwise\nparser: {type: regex, range: [3, 3]}\n",
            ":4: parser.range: range [3, 3]: the low end must be below the high end",
        ),
    ],
)
def test_fuzz_found_yaml_is_refused_naming_file_and_line(tmp_path, text, needle):
    f = tmp_path / "c.yaml"
    f.write_text(text)
    res = run_cli("validate", str(f))
    assert_clean_failure(res, f)
    assert needle in res.err, res.err


@pytest.mark.parametrize(
    "override,needle",
    [
        ("judges.²=x", "override 'judges.²=x'"),  # '²'.isdigit() but int('²') fails: was ValueError
        ("checkpoint.keep.²=1", "override 'checkpoint.keep.²=1'"),
        ("seed=!!int x", "seed: Input should be a valid integer"),  # was ValueError from the YAML value
        ("judges.0.weight=.inf", "judges.0.weight: Input should be a finite number"),
        ("seed=100000000000000000000000", "seed: Input should be less than"),  # torch.manual_seed overflow at run time
    ],
)
def test_fuzz_found_overrides_are_refused_naming_the_override(override, needle):
    res = run_cli("validate", str(QUICKSTART), f"--set={override}")
    assert_clean_failure(res, QUICKSTART, or_names="override '")
    assert needle in res.err, res.err


def test_a_check_of_a_block_an_override_changed_names_the_override_not_only_the_file():
    # the rule block is checked as a whole (regex-format needs a pattern): the file is fine, the override is not
    res = run_cli("judge", "lint", str(ROOT / "judges" / "format.yaml"))
    assert res.code == 0, res.err
    sample = str(ROOT / "judges" / "fixtures" / "format.json")
    res = run_cli("judge", "render", "builtin:format", "--sample", sample, "rule.pattern=")
    assert res.code != 0 and "Traceback" not in res.err
    assert "(with override 'rule.pattern=')" in res.err and "regex-format needs pattern" in res.err, res.err


CALC = (ROOT / "pipelines" / "calc-episodes.yaml").read_text()
BOOM = "class E:\n  def __init__(self): raise RuntimeError('boom')\n  def reset(self, row): pass\n  def step(self, a): pass\n"
ENV_LINE = "env: {type: calc, max_turns: 3, max_total_tokens: 1536, observation_tokens: 128, wall_time_s: 120, tool_time_s: 30}"


@pytest.mark.parametrize(
    "env, files, needle",
    [
        ("env: {type: calc, kwargs: {bogus: 1}}", {}, "unexpected keyword argument 'bogus'"),
        ("env: {type: python, path: 'e.py:Env'}", {"e.py": "def f(:\n"}, "raised SyntaxError"),
        ("env: {type: python, path: 'e.py:Env'}", {"e.py": "x = 1\n"}, "has no Env"),
        ("env: {type: python, path: 'os:path'}", {}, "'os' is a standard library module"),
        ("env: {type: agent, path: 'e.py:nofunc'}", {"e.py": "def f(): pass\n"}, "has no nofunc"),
        ("env: {type: python, path: 'e.py:E'}", {"e.py": BOOM}, "raised RuntimeError: boom"),
        ("env: {type: calc, max_total_tokens: 40}", {}, "env.max_total_tokens (40) must exceed rollout.max_new_tokens (48)"),
        ("env: {type: calc, observation_tokens: 4096}", {}, "env.observation_tokens (4096) must be below env.max_total_tokens"),
        ("", {}, "judges episodes (a trajectory, an environment's signal), but"),
    ],
)
def test_validate_and_run_refuse_what_an_env_run_would_meet_before_ray(tmp_path, env, files, needle):
    # an environment that cannot be built, or episodes' judge with no environment, is found where
    # the pipeline is checked: validate and run agree, and run says it before starting Ray
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    f = tmp_path / "p.yaml"
    f.write_text(CALC.replace(ENV_LINE, env))
    for argv in (("validate", str(f)), ("run", str(f), "--dry-run")):
        res = run_cli(*argv)
        assert res.code != 0 and "Traceback" not in res.err, res.err
        assert needle in res.err, res.err
