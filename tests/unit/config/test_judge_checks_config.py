"""``judges[].gate`` and ``judges[].canary`` in a pipeline: validated with FILE:LINE errors, data
paths resolved against the pipeline file."""

import os
from pathlib import Path

import pytest

from grm.config import ConfigError
from grm.config.resolve import load_pipeline
from tests.conftest import run_grm


def pipeline(tmp_path: Path, judge: str) -> Path:
    (tmp_path / "prompts.jsonl").write_text('{"prompt": "hi"}\n')
    p = tmp_path / "p.yaml"
    p.write_text(
        "name: t\n"
        "pools: {a: {cpus: 1}}\n"
        "policy: {spec: builtin:smollm2-135m-instruct, pool: a}\n"
        "judges:\n"
        f"  - spec: builtin:numeric-answer\n{judge}"
        "data: {prompts: prompts.jsonl}\n"
    )
    return p


@pytest.mark.parametrize(
    ("judge", "line", "needle"),
    [
        ("    gate: {data: builtin:arith-pairs, min_acuracy: 0.8}\n", ":6:", "did you mean 'min_accuracy'"),
        ("    gate: {data: builtin:arith-pairs}\n", ":6:", "min_accuracy: required field is missing"),
        ("    gate:\n      data: builtin:arith-pairs\n      min_accuracy: 1.5\n", ":8:", "less than or equal to 1"),
        ("    gate: {data: nope.json, min_accuracy: 0.8}\n", ":6:", "nope.json"),
        ("    gate: {data: builtin:arith-pears, min_accuracy: 0.8}\n", ":6:", "unknown builtin data set 'builtin:arith-pears'"),
        ("    gate: {data: builtin:arith-pairs, min_accuracy: 0.8, limit: 0}\n", ":6:", "greater than or equal to 1"),
        ("    canary: {data: builtin:arith-pairs}\n", ":6:", "every: required field is missing"),
        ("    canary:\n      data: builtin:arith-pairs\n      every: 0\n", ":8:", "greater than or equal to 1"),
        ("    canary: {data: builtin:arith-pairs, every: 2, max_drop: -0.1}\n", ":6:", "greater than or equal to 0"),
    ],
)
def test_bad_gate_or_canary_fields_name_file_and_line(tmp_path, judge, line, needle):
    p = pipeline(tmp_path, judge)
    with pytest.raises(ConfigError) as e:
        load_pipeline(p)
    assert f"{p}{line}" in str(e.value) and needle in str(e.value), str(e.value)


def test_relative_gate_and_canary_data_are_resolved_against_the_pipeline(tmp_path, monkeypatch):
    (tmp_path / "pairs.jsonl").write_text("{}\n")
    p = pipeline(
        tmp_path,
        "    gate: {data: pairs.jsonl, min_accuracy: 0.7}\n    canary: {data: pairs.jsonl, every: 3}\n",
    )
    monkeypatch.chdir(Path(os.sep))
    role = load_pipeline(p).spec.judges[0]
    assert role.gate.data == role.canary.data == str((tmp_path / "pairs.jsonl").resolve())
    assert (role.gate.limit, role.canary.limit, role.canary.max_drop) == (None, 32, 0.1)  # the documented defaults


def test_grm_validate_reports_a_bad_gate_in_one_line(tmp_path):
    p = pipeline(tmp_path, "    gate: {data: builtin:arith-pairs, min_accuracy: 2}\n")
    r = run_grm("validate", str(p))
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert f"{p}:6:" in r.stderr and "judges.0.gate.min_accuracy" in r.stderr, r.stderr
