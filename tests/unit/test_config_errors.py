"""Every kind of broken YAML gets one clear message naming file and line, exit non-zero, no traceback."""

import pytest

from tests.conftest import run_grm

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
