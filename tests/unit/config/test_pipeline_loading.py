"""One validation for `grm validate` and `grm run` (config.resolve.load_pipeline)."""

import os
from pathlib import Path

import pytest

from grm.config import ConfigError, validate_tree
from grm.config.resolve import load_pipeline
from tests.unit.fuzz.support import assert_clean_failure, run_cli

ROOT = Path(__file__).resolve().parents[3]


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
    one_order = BASE.replace(
        "  - {spec: builtin:numeric-answer}", "  - {spec: builtin:pairwise-logprob, pool: a, overrides: [position.swap=false]}"
    )
    with pytest.raises(ConfigError, match=r"p.yaml:5: judge 'pairwise-logprob' is pairwise; .* needs position.swap: true"):
        validate_tree(write(tmp_path, one_order))
    ranks = BASE + "train: {backend: {ranks: 2}, micro_batch_size: 1}\n"  # pool a has 1 CPU for 2 ranks
    with pytest.raises(ConfigError, match=r"p.yaml:2: pool 'a' has 1 cpus per node for 2 policy rank\(s\) per node"):
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


@pytest.mark.parametrize(
    "pools,train,error",
    [
        ("{a: {cpus: 2}}", "{backend: {ranks: 2}, micro_batch_size: 1}", None),
        ("{a: {cpus: 4, nodes: 2}}", "{backend: {ranks: 4, zero_stage: 3}, micro_batch_size: 1}", None),
        ("{a: {cpus: 2}}", "{backend: {ranks: 2, type: torch}, micro_batch_size: 1}", r"p.yaml:7: .*needs the deepspeed backend"),
        ("{a: {cpus: 2, nodes: 4}}", "{backend: {ranks: 2}, micro_batch_size: 1}", r"p.yaml:7: 2 ranks do not spread evenly"),
        ("{a: {cpus: 2, gpus: 1}}", "{backend: {ranks: 2}, micro_batch_size: 1}", r"p.yaml:2: pool 'a' has 1 gpus per node"),
    ],
)
def test_multi_rank_layouts_are_checked_at_load(tmp_path, pools, train, error):
    """A multi-rank policy takes one whole share of its pool per rank (checked by validate and run)."""
    (tmp_path / "prompts.jsonl").write_text('{"prompt": "hi"}\n')
    text = BASE.replace("pools: {a: {cpus: 1}}", f"pools: {pools}") + f"train: {train}\n"
    if error is None:
        assert load_pipeline(write(tmp_path, text)).spec.train.backend.ranks > 1
    else:
        with pytest.raises(ConfigError, match=error):
            validate_tree(write(tmp_path, text))


def test_a_judge_cannot_share_a_multi_rank_policy_pool(tmp_path):
    (tmp_path / "prompts.jsonl").write_text('{"prompt": "hi"}\n')
    text = BASE.replace("pools: {a: {cpus: 1}}", "pools: {a: {cpus: 2}}").replace(
        "  - {spec: builtin:numeric-answer}", "  - {spec: builtin:pointwise-logprob, pool: a}"
    )
    with pytest.raises(ConfigError, match=r"judges\[0\] share pool 'a' with a 2-rank policy"):
        validate_tree(write(tmp_path, text + "train: {backend: {ranks: 2}, micro_batch_size: 1}\n"))


@pytest.mark.parametrize(
    ("judge", "extra", "error"),
    [
        (
            "{spec: builtin:pairwise-logprob, pool: a}",
            "algorithm: {type: reinforce_pp, group_size: 1, prompts_per_step: 4}\n",
            "needs algorithm.group_size >= 2",
        ),
        (
            "{spec: builtin:pairwise-logprob, pool: a, overrides: [groups.strategy=anchor]}",
            "data: {prompts: prompts.jsonl, reference_field: null}\n",
            "groups.anchor: reference\\), but data.reference_field is null",
        ),
    ],
)
def test_pairwise_judges_in_groups_are_checked_at_load(tmp_path, judge, extra, error):
    (tmp_path / "prompts.jsonl").write_text('{"prompt": "hi"}\n')
    text = BASE.replace("  - {spec: builtin:numeric-answer}", f"  - {judge}")
    if extra.startswith("data:"):
        text = text.replace("data: {prompts: prompts.jsonl}\n", "")
    with pytest.raises(ConfigError, match=error):
        load_pipeline(write(tmp_path, text + extra))


def test_a_greedy_anchor_turns_on_the_greedy_rollout(tmp_path):
    (tmp_path / "prompts.jsonl").write_text('{"prompt": "hi"}\n')
    plain = load_pipeline(write(tmp_path, BASE.replace("builtin:numeric-answer}", "builtin:pairwise-logprob, pool: a}")))
    assert plain.spec.rollout.greedy_anchor is False  # round_robin by default: no anchor to sample
    text = BASE.replace(
        "  - {spec: builtin:numeric-answer}",
        "  - {spec: builtin:pairwise-logprob, pool: a, overrides: [groups.strategy=anchor, groups.anchor=greedy]}",
    )
    loaded = load_pipeline(write(tmp_path, text))
    assert loaded.spec.rollout.greedy_anchor is True
    assert loaded.judges[0].spec.groups.strategy == "anchor"


def test_a_previous_anchor_samples_greedy_answers_and_a_reference_fallback_needs_references(tmp_path):
    (tmp_path / "prompts.jsonl").write_text('{"prompt": "hi"}\n')
    judge = "  - {spec: builtin:pairwise-logprob, pool: a, overrides: [groups.strategy=anchor, groups.anchor=previous%s]}"
    text = BASE.replace("  - {spec: builtin:numeric-answer}", judge % "")
    loaded = load_pipeline(write(tmp_path, text))
    assert loaded.spec.rollout.greedy_anchor is True  # the store is fed with each step's greedy answers
    assert loaded.judges[0].spec.groups.fallback == "greedy"
    no_refs = BASE.replace("  - {spec: builtin:numeric-answer}", judge % ", groups.fallback=reference")
    no_refs = no_refs.replace("data: {prompts: prompts.jsonl}", "data: {prompts: prompts.jsonl, reference_field: null}")
    with pytest.raises(ConfigError, match="groups.fallback: reference, for prompts not seen before.*reference_field is null"):
        load_pipeline(write(tmp_path, no_refs))


def test_the_old_pipeline_judge_deadline_is_refused_naming_where_it_lives_now(tmp_path):
    """``faults.judge_timeout_s`` is gone (one deadline setting: the judge spec's limits); an old
    YAML fails on its line and says what to write instead, and the judge-role override works."""
    (tmp_path / "prompts.jsonl").write_text('{"prompt": "hi"}\n')
    old = write(tmp_path, BASE + "faults: {judge_timeout_s: 900}\n")
    with pytest.raises(ConfigError, match=r"p.yaml:7: faults: judge_timeout_s is no longer .* overrides: \[limits.deadline_s="):
        load_pipeline(old)
    role = "  - {spec: builtin:pairwise-logprob, pool: a, overrides: [limits.deadline_s=900]}"
    new = BASE.replace("  - {spec: builtin:numeric-answer}", role)
    (judge,) = load_pipeline(write(tmp_path, new, "new.yaml")).judges
    assert judge.spec.limits.deadline_s == 900


# Found by the fuzzers (tests/unit/fuzz): was accepted, then failed at run time.
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


SGLANG = "  overrides: ['engine={type: sglang, urls: [\"http://127.0.0.1:9\"]}']\n"


@pytest.mark.parametrize(
    "schedule,engine,env,error",
    [
        ("{mode: async, interruptible: true}", SGLANG, "", None),
        ("{mode: async, max_staleness: 0, interruptible: true}", SGLANG, "", None),
        ("{mode: sync, interruptible: true}", SGLANG, "", r"p.yaml:\d+: .*only in mode: async"),
        (
            "{mode: async, interruptible: true}",
            "",
            "",
            r"p.yaml:\d+: interruptible rollouts need a served policy engine .* hf engine",
        ),
        ("{mode: async, interruptible: true}", SGLANG, "env: {type: calc}\n", r"p.yaml:\d+: an env: run's episodes already"),
    ],
)
def test_interruptible_rollouts_need_async_a_served_engine_and_single_answers(tmp_path, schedule, engine, env, error):
    (tmp_path / "prompts.jsonl").write_text('{"prompt": "hi"}\n')
    text = BASE.replace("pool: a}\n", "pool: a,\n" + engine + "  }\n" if engine else "pool: a}\n", 1) + env
    text += f"schedule: {schedule}\n"
    if error is None:
        assert load_pipeline(write(tmp_path, text)).spec.schedule.interruptible
    else:
        with pytest.raises(ConfigError, match=error):
            validate_tree(write(tmp_path, text))


def test_async_with_no_staleness_is_sync_modes_schedule(tmp_path):
    """η = 0: nothing runs ahead, and each phase runs alone with the node's cores, as in sync mode."""
    (tmp_path / "prompts.jsonl").write_text('{"prompt": "hi"}\n')
    spec = load_pipeline(write(tmp_path, BASE + "schedule: {mode: async, max_staleness: 0}\n")).spec.schedule
    sync = load_pipeline(write(tmp_path, BASE + "schedule: {mode: sync}\n", "s.yaml")).spec.schedule
    assert (
        (spec.ahead, spec.phases_alone, spec.lends_cores) == (sync.ahead, sync.phases_alone, sync.lends_cores) == (0, True, False)
    )
    one = load_pipeline(write(tmp_path, BASE + "schedule: {mode: async}\n", "a.yaml")).spec.schedule
    assert (one.ahead, one.phases_alone, one.lends_cores) == (1, False, True)
