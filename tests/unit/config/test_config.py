from pathlib import Path

import pytest

from grm.config import ConfigError, PipelineSpec, load, validate_tree
from grm.config.loading import apply_overrides, load_yaml, validate
from grm.config.paths import resolve_builtin

PIPE = """\
name: t
pools: {train: {cpus: 1}, judge: {cpus: 1}}
policy: {spec: builtin:smollm2-135m-instruct, pool: train}
judges:
  - {spec: builtin:numeric-answer}
data: {prompts: builtin:arith-prompts}
algorithm: {type: grpo, group_size: 4, prompts_per_step: 3}
train: {micro_batch_size: 4}
"""


def _write(tmp_path: Path, text: str) -> Path:
    f = tmp_path / "p.yaml"
    f.write_text(text)
    return f


def test_divisibility_checked_at_load(tmp_path):
    f = _write(tmp_path, PIPE.replace("micro_batch_size: 4", "micro_batch_size: 5"))
    with pytest.raises(ConfigError, match="not divisible by micro_batch_size"):
        load(f)
    assert isinstance(load(_write(tmp_path, PIPE)), PipelineSpec)


def test_unknown_pool_named(tmp_path):
    f = _write(tmp_path, PIPE.replace("pool: train}", "pool: trian}"))
    with pytest.raises(ConfigError, match="'trian' is not a declared pool"):
        load(f)


def test_override_types_checked(tmp_path):
    f = _write(tmp_path, PIPE)
    spec = load(f, ["algorithm.group_size=8", "train.lr=3e-6", "judges.0.weight=0.5"])
    assert spec.algorithm.group_size == 8 and spec.train.lr == 3e-6 and spec.judges[0].weight == 0.5
    with pytest.raises(ConfigError, match="override 'train.lr=fast'"):
        load(f, ["train.lr=fast"])
    with pytest.raises(ConfigError, match="expected key.path=value"):
        load(f, ["train.lr"])


def test_line_numbers_for_nested_errors(tmp_path):
    f = _write(tmp_path, PIPE.replace("group_size: 4", "group_size: 0"))
    with pytest.raises(ConfigError) as e:
        load(f)
    assert f"{f}:7: algorithm.group_size" in str(e.value)


def test_builtin_resolution_and_relative_paths(tmp_path):
    assert resolve_builtin("smollm2-135m-instruct", "policy").name == "smollm2-135m-instruct.yaml"
    with pytest.raises(FileNotFoundError, match="known:"):
        resolve_builtin("nope", "judges")
    (tmp_path / "j.j2").write_text("{# expects: prompt, response #}{{ prompt }} {{ response }}")
    j = tmp_path / "j.yaml"
    j.write_text("name: j\nmode: pointwise\nmodel: smollm2-135m-instruct\ntemplate: j.j2\nparser: {range: [1, 10]}\n")
    assert load(j).template == "j.j2"


def test_validate_tree_checks_referenced_specs(tmp_path):
    (tmp_path / "bad-judge.yaml").write_text(
        "name: j\nmode: pointwise\nmodel: m\ntemplate: builtin:helpfulness-pointwise\nparser: {type: verdict}\n"
    )
    f = _write(tmp_path, PIPE.replace("builtin:numeric-answer}", "bad-judge.yaml, pool: judge}"))
    with pytest.raises(ConfigError, match="bad-judge.yaml:1: .*verdict parser only makes sense"):
        validate_tree(f)


def test_parse_errors_are_config_errors(tmp_path):
    loc = load_yaml(_write(tmp_path, "name: x\nmodel: m\n"))
    apply_overrides(loc, ["generation.top_p=2"], load.__globals__["PolicySpec"])
    with pytest.raises(ConfigError, match="override 'generation.top_p=2'"):
        validate(load.__globals__["PolicySpec"], loc)


def test_length_control_errors_name_the_file_line_and_field(tmp_path):
    def bad(block: str, message: str) -> None:
        f = _write(tmp_path, PIPE.replace("prompts_per_step: 3}", f"prompts_per_step: 3, length_control: {block}}}"))
        with pytest.raises(ConfigError, match=message) as e:
            load(f)
        assert f"{f}:7: algorithm" in str(e.value)

    bad("{method: penalty}", "algorithm.length_control: method penalty needs coef")
    bad("{method: regress, coef: 0.1}", "coef only applies to method penalty")
    bad("{method: penalty, coef: -1}", "greater than or equal to 0")
    bad("{method: median}", "'none', 'regress' or 'penalty'")
    f = _write(tmp_path, PIPE.replace("prompts_per_step: 3}", "prompts_per_step: 3, length_control: {method: regress}}"))
    spec = load(f, ["algorithm.length_control.unit=chars"])
    assert spec.algorithm.length_control.method == "regress" and spec.algorithm.length_control.unit == "chars"
    with pytest.raises(ConfigError, match="needs group_size >= 3"):
        load(f, ["algorithm.group_size=2"])
