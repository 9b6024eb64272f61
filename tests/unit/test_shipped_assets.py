"""Every shipped YAML and template is loaded, linted and rendered (no model needed)."""

from pathlib import Path

import pytest

from grm.config import validate_tree
from grm.config.paths import builtin_dir, list_builtin
from grm.judges.cli import read_samples
from grm.judges.lint import lint_file
from grm.judges.render import render

ROOT = Path(__file__).resolve().parents[2]
YAMLS = sorted(p for d in ("policy", "judges", "pipelines", "benchmarks/peer") for p in (ROOT / d).glob("*.yaml"))
JUDGES = sorted((ROOT / "judges").glob("*.yaml"))


@pytest.mark.parametrize("path", YAMLS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_shipped_yaml_validates(path):
    validate_tree(path)


@pytest.mark.parametrize("path", JUDGES + sorted((ROOT / "prompts").glob("*.j2")), ids=lambda p: p.name)
def test_shipped_judges_and_templates_lint_clean(path):
    assert lint_file(path) == []


@pytest.mark.parametrize("path", JUDGES, ids=lambda p: p.stem)
def test_every_judge_renders_its_fixture(path):
    fixture = ROOT / "judges" / "fixtures" / f"{path.stem}.json"
    assert fixture.exists(), f"every builtin judge needs a fixture: {fixture}"
    from grm.judges.runtime import load

    judge = load(path)
    for sample in read_samples(str(fixture)):
        stages = render(judge, sample)
        if judge.spec.mode == "rule":
            assert stages == []
            continue
        expected_views = 2 if judge.spec.position.swap else (judge.spec.sampling.n if judge.spec.position.shuffle else 1)
        if judge.spec.mode == "checklist":  # one judge prompt per question; a written checklist shows a placeholder
            written = judge.spec.checklist.source == "model"
            expected_views = 1 if written else len(sample.metadata["checklist"])
            assert [st["stage"] for st in stages if st["stage"] != "judge"] == (["checklist"] if written else [])
        assert len([s for s in stages if s["stage"] == "judge"]) == expected_views
        text = "\n".join(m["content"] for s in stages for m in s["request"].messages)
        assert sample.prompt in text
        for r in [sample.response] if sample.response else sample.responses:
            assert r in text


def test_builtin_names_resolve():
    assert "helpfulness-pointwise" in list_builtin("judges")
    assert "smollm2-135m-instruct" in list_builtin("policy")
    assert builtin_dir("prompts").is_dir()


def test_default_judges_resolve_to_the_chosen_variants():
    from grm.config import load_judge
    from grm.config.paths import DEFAULT_JUDGES, resolve_builtin

    for mode, by_model in DEFAULT_JUDGES.items():
        assert resolve_builtin(mode, "judges").stem == by_model["*"]
        spec = load_judge(f"builtin:{mode}")
        assert spec.name == by_model["*"] and spec.mode == mode
        for model, name in by_model.items():
            if model != "*":  # the variant follows the model override, which still applies
                spec = load_judge(f"builtin:{mode}", overrides=[f"model={model}"])
                assert (spec.name, spec.model, spec.mode) == (name, model, mode)
    assert load_judge("builtin:pairwise", overrides=["model=qwen2.5-coder-0.5b-instruct"]).name == "pairwise-logprob"
    with pytest.raises(FileNotFoundError, match="known: .*pairwise"):
        resolve_builtin("no-such-judge", "judges")
