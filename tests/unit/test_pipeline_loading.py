"""One validation for `grm validate` and `grm run` (config.resolve.load_pipeline)."""

import os
from pathlib import Path

import pytest

from grm.config import ConfigError, validate_tree
from grm.config.resolve import load_pipeline

ROOT = Path(__file__).resolve().parents[2]


def write(tmp_path: Path, text: str, name: str = "p.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


BASE = """name: t
pools: {a: {cpus: 1}}
policy: {spec: builtin:smollm2-135m-instruct, pool: a}
judges:
  - {spec: builtin:numeric-answer}
data: {prompts: prompts.jsonl}
"""


def test_a_judge_yaml_is_not_a_pipeline():
    with pytest.raises(ConfigError, match="helpfulness-pointwise.yaml: this is a judge spec, not a pipeline"):
        load_pipeline(ROOT / "judges" / "helpfulness-pointwise.yaml")


def test_relative_data_path_is_resolved_against_the_pipeline_file(tmp_path, monkeypatch):
    sub = tmp_path / "cfg"
    sub.mkdir()
    (sub / "prompts.jsonl").write_text('{"prompt": "hi"}\n')
    p = write(sub, BASE)
    monkeypatch.chdir(tmp_path)  # another working directory
    loaded = load_pipeline(os.path.relpath(p, tmp_path))
    assert loaded.spec.data.prompts == str((sub / "prompts.jsonl").resolve())


def test_validate_refuses_what_run_refuses(tmp_path):
    (tmp_path / "prompts.jsonl").write_text('{"prompt": "hi"}\n')
    pairwise = BASE.replace("  - {spec: builtin:numeric-answer}", "  - {spec: builtin:pairwise-logprob, pool: a}")
    with pytest.raises(ConfigError, match=r"p.yaml:5: judge 'pairwise-logprob' is pairwise"):
        validate_tree(write(tmp_path, pairwise))
    ranks = BASE + "train: {backend: {ranks: 2}, micro_batch_size: 1}\n"
    with pytest.raises(ConfigError, match=r"p.yaml:7: train.backend.ranks > 1"):
        validate_tree(write(tmp_path, ranks))
    twice = BASE.replace(
        "  - {spec: builtin:numeric-answer}", "  - {spec: builtin:numeric-answer}\n  - {spec: builtin:numeric-answer}"
    )
    with pytest.raises(ConfigError, match="two judges share a name"):
        validate_tree(write(tmp_path, twice))


def test_algorithm_variants_keep_ppo_fields_on_ppo(tmp_path):
    (tmp_path / "prompts.jsonl").write_text('{"prompt": "hi"}\n')
    with pytest.raises(ConfigError, match="gamma"):
        validate_tree(write(tmp_path, BASE + "algorithm: {type: grpo, gamma: 0.9}\n"))
    spec = load_pipeline(write(tmp_path, BASE + "algorithm: {group_size: 2, prompts_per_step: 2}\n")).spec
    assert spec.algorithm.type == "grpo"  # no type: grpo, as before
    ppo = load_pipeline(write(tmp_path, BASE + "algorithm: {type: ppo, group_size: 2, prompts_per_step: 2, dual_clip: 3}\n")).spec
    assert ppo.algorithm.critic_lr == 1e-5 and ppo.algorithm.dual_clip == 3
    with pytest.raises(ConfigError, match="mini_batches"):
        validate_tree(
            write(
                tmp_path,
                BASE + "algorithm: {group_size: 2, prompts_per_step: 2, mini_batches: 3}\ntrain: {micro_batch_size: 1}\n",
            )
        )
