"""What the fuzzers found, pinned as plain examples: each was a traceback, a hang or a silent
default before its fix, and stays covered even if a strategy changes."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pytest

from grm.config import JudgeSpec
from grm.config.parsers import JsonParser, TargetParser
from grm.data.errors import DataError
from grm.data.items import default_map, to_items
from grm.data.sources import load_rows
from grm.judges import Sample, build_judge
from grm.judges.parsers import build_parser, last_boxed
from tests.unit.fuzz.support import assert_clean_failure, run_cli
from tests.unit.judges.fake_engine import ScriptedEngine

ROOT = Path(__file__).resolve().parents[3]
QUICKSTART = ROOT / "pipelines" / "quickstart.yaml"
POLICY = "name: x\nmodel: m\n"


@pytest.mark.parametrize(
    "text,needle",
    [
        (POLICY + "0x1F: 1\n", ":3: 31: Keys should be strings"),  # a YAML 1.1 int key: was int('0x1F')
        (POLICY + "1:30: 1\n", ":3: 90: Keys should be strings"),
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
def test_yaml(tmp_path, text, needle):
    f = tmp_path / "c.yaml"
    f.write_text(text)
    res = run_cli("validate", str(f))
    assert_clean_failure(res, f)
    assert needle in res.err, res.err


def test_yaml_alias_bomb_is_refused_fast(tmp_path):
    lines = ["a0: &a0 [" + ", ".join(["x"] * 9) + "]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 9)]  # 9**9 values expanded
    f = tmp_path / "bomb.yaml"
    f.write_text(POLICY + "\n".join(lines) + "\n")
    t0 = time.perf_counter()
    res = run_cli("validate", str(f))
    assert time.perf_counter() - t0 < 10
    assert_clean_failure(res, f)
    assert f"{f}:7: more than 10000 values once its aliases are expanded" in res.err  # a4 holds 9**5


def test_yaml_merge_keys_work(tmp_path):
    f = tmp_path / "m.yaml"
    f.write_text(POLICY + "engine:\n  <<: {type: hf, dtype: bf16}\n  dtype: fp32\n")  # was "no constructor for merge"
    assert run_cli("validate", str(f)).code == 0


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
def test_overrides(override, needle):
    res = run_cli("validate", str(QUICKSTART), f"--set={override}")
    assert_clean_failure(res, QUICKSTART, or_names="override '")
    assert needle in res.err, res.err


def test_listwise_judge_needs_groups(tmp_path):
    f = tmp_path / "p.yaml"
    f.write_text(
        "name: lw\npools: {train: {cpus: 1}, judge: {cpus: 1}}\npolicy: {spec: builtin:smollm2-135m-instruct, pool: train}\n"
        "judges:\n  - {spec: builtin:listwise-grm, pool: judge}\ndata: {prompts: builtin:arith-prompts}\n"
        "algorithm: {type: reinforce_pp, group_size: 1, prompts_per_step: 4}\n"
    )
    res = run_cli("validate", str(f))
    assert_clean_failure(res, f)
    assert f"{f}:5: judge 'listwise-grm' is listwise" in res.err and "group_size >= 2" in res.err


def _judge(tmp_path: Path, template: str, sample: dict, **spec: object) -> tuple[Path, Path, Path]:
    (tmp_path / "t.j2").write_text(template)
    judge = tmp_path / "j.yaml"
    judge.write_text(json.dumps({"name": "t", "mode": "pointwise", "model": "fuzz-model", "template": "t.j2", **spec}))
    s = tmp_path / "s.json"
    s.write_text(json.dumps(sample))
    return judge, tmp_path / "t.j2", s


@pytest.mark.parametrize(
    "expr,needle",
    [
        ("{{ 1/0 }}", ":2: template error while rendering: ZeroDivisionError"),
        ("{{ range(100001)|list }}", ":2: template stopped: range() of 100,001 items"),
        ("{{ -100|letter }}", ":2: template error while rendering: ValueError"),
        ("{% macro m() %}{{ m() }}{% endmacro %}{{ m() }}", "RecursionError"),
        ("{{ prompt|truncate(-1) }}", ":2: template error while rendering: AssertionError"),
        ("{{ metadata.update({'a': 1}) }}", ":2: template refused by the sandbox"),  # rendered, and changed the sample
    ],
)
def test_templates(tmp_path, expr, needle):
    judge, template, sample = _judge(tmp_path, "{# expects: prompt, response #}{{ prompt }} {{ response }}\n" + expr, SAMPLE)
    res = run_cli("judge", "render", str(judge), "--sample", str(sample))
    assert_clean_failure(res, template)
    assert needle in res.err, res.err


SAMPLE = {"prompt": "p", "response": "r", "metadata": {"topic": "m"}}


@pytest.mark.parametrize(
    "sample,needle",
    [
        ({"messages": [1, 2], "response": "r"}, "'messages' must be a list of objects"),  # was AttributeError
        ({"prompt": "p", "response": "r", "metadata": [1]}, "'metadata' must be an object"),
        ({"prompt": "p", "response": "r", "id": [1]}, "'id' must be a string"),
        ({"prompt": "p"}, "a pointwise judge needs 'response'"),  # named 'sample', not the file
    ],
)
def test_sample_files(tmp_path, sample, needle):
    judge, _, s = _judge(tmp_path, "{# expects: prompt, response #}{{ prompt }} {{ response }}", sample)
    res = run_cli("judge", "render", str(judge), "--sample", str(s))
    assert_clean_failure(res, s)
    assert needle in res.err, res.err


def test_data_rows(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(
        b'{"prompt": "a", "response": "b"}\n{"prompt": "\xff", "response": "b"}\n'
    )  # was pyarrow's UnicodeDecodeError
    with pytest.raises(DataError, match=f"{bad}:2: not valid UTF-8"):
        load_rows(str(bad))
    mixed = tmp_path / "mixed.jsonl"  # one column, two types: datasets refused the file without naming a row
    mixed.write_text('{"prompt": "q", "response": "r", "label": 1}\n{"prompt": "q2", "response": "r", "label": "x"}\n')
    assert [r["label"] for r in load_rows(str(mixed))] == [1, "x"]
    csv = tmp_path / "d.csv"  # pandas read "12" as 12.0 (then refused: not a string) and "NA" as missing
    csv.write_text("prompt,response,reference,human_score\n12,NA,42,3\n,x,,4\n" + "q,r,," + "y" * 2**20 + "\n")
    rows = load_rows(str(csv))
    assert rows[0] == {"prompt": "12", "response": "NA", "reference": "42", "human_score": "3"}
    assert rows[1]["prompt"] is None and rows[1]["reference"] is None
    with pytest.raises(DataError, match=f"{csv}:3: missing column 'prompt'"):
        to_items(rows, default_map(str(csv), set(rows[0])), str(csv))
    nan = [{"prompt": "q", "response": "r", "human_score": float("nan")}]
    with pytest.raises(DataError, match="row 0: human_score must be a finite number"):
        to_items(nan, default_map("x", set(nan[0])), "x")


def explode(text: str) -> float:
    return float(text)


def not_a_number(text: str) -> object:
    return {"nan": float("nan"), "dict": {"score": 1}, "bool": True}.get(text.strip(), text)


def test_parsers():
    big = build_parser(JsonParser())
    assert big('{"score": ' + "9" * 5000 + "}").value is None  # was ValueError: int past 4300 digits
    assert big('{"score": 1} {"a": ' + "[" * 100_000).value == 1.0  # was RecursionError
    assert build_parser(JsonParser(field="a.²"))('{"a": [1, 2, 3]}').error  # was ValueError from int('²')
    lists = build_parser(JsonParser(field="s"), expected=3)
    assert lists('{"s": [1, 2]}').error == "expected 3 scores, found 2" and lists('{"s": 5}').value is None
    raising = build_parser(TargetParser(target="tests.unit.fuzz.test_found:explode"))
    assert raising("seven").error.startswith("explode raised ValueError")  # escaped the judge before
    odd = build_parser(TargetParser(target="tests.unit.fuzz.test_found:not_a_number"))
    assert [odd(t).value for t in ("nan", "dict", "bool", "word", "4")] == [None, None, None, None, None]
    t0 = time.perf_counter()
    assert last_boxed("\\boxed{" * 20_000 + "\\boxed{7}") == "7"  # each unclosed box rescanned the rest: minutes
    assert time.perf_counter() - t0 < 1


def test_listwise_json_judge_counts_a_wrong_shape(tmp_path):
    (tmp_path / "l.j2").write_text("{# expects: prompt, responses #}{{ prompt }}{% for r in responses %} {{ r }}{% endfor %}")
    spec = JudgeSpec(
        name="lw", mode="listwise", model="m", template="l.j2", parser={"type": "json", "field": "s"}, on_failure={"retries": 0}
    )
    outputs = iter(['{"s": [7]}', '{"s": 4}', '{"s": [1, 2, 3, 4]}'])  # short (was IndexError), scalar (uncounted), long
    judge = build_judge(spec, tmp_path, ScriptedEngine(lambda *a: next(outputs)))
    for _ in range(3):
        [r] = judge.score_batch([Sample(prompt="p", responses=["a", "b", "c"])])
        assert r.masked and r.parse_failures == 1 and not any(math.isfinite(x) for x in r.scores or [])
