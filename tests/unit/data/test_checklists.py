"""A prompt's checklist from the data: checked when the data loads (naming the row), carried to the
judges as ``Sample.metadata["checklist"]`` in pipelines and in ``grm eval``."""

import json

import pytest

from grm.config import ConfigError, load_judge
from grm.config.pipeline import DataSpec
from grm.config.resolve import load_pipeline
from grm.data.checklists import read_checklist
from grm.data.errors import DataError
from grm.data.items import to_items
from grm.data.prompts import Prompt, check_checklists, load_prompts


def jsonl(tmp_path, rows, name="p.jsonl"):
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_read_checklist_normalises_strings_objects_and_json_text():
    want = [{"question": "Is it right?", "weight": 1.0}, {"question": "Is it short?", "weight": 2.5}]
    assert read_checklist([" Is it right? ", {"question": "Is it short?", "weight": 2.5}], "x") == want
    assert read_checklist(json.dumps(["Is it right?", {"question": "Is it short?", "weight": 2.5}]), "x") == want  # a CSV cell


@pytest.mark.parametrize(
    "value, message",
    [
        (None, "is missing; expected a non-empty list of yes/no questions"),
        ([], "expected a non-empty list"),
        ("Is it right?", "text that is not a JSON list"),
        (7, "found 7"),
        (["ok", ""], "item 1: 'question' must be a non-empty string"),
        (["ok", 3], "item 1: expected a question"),
        ([{"question": "q", "weight": -1}], "item 0: 'weight' must be a number above 0, found -1"),
        ([{"question": "q", "weight": True}], "'weight' must be a number above 0"),
        ([{"question": "q", "why": "x"}], r"item 0: unknown key\(s\) \['why'\]"),
    ],
)
def test_read_checklist_says_what_is_wrong(value, message):
    with pytest.raises(DataError, match=r"^f row 3: column 'c'.*" + message):
        read_checklist(value, "f row 3: column 'c'")


def test_pipeline_prompts_carry_their_checklist_and_a_bad_row_is_named(tmp_path):
    good = [{"prompt": "a", "checklist": ["Is it a?"]}, {"prompt": "b", "checklist": [{"question": "Is it b?", "weight": 2}]}]
    path = jsonl(tmp_path, good)
    prompts = load_prompts(DataSpec(prompts=str(path), checklist_field="checklist"))
    assert [p.metadata for p in prompts] == [
        {"checklist": [{"question": "Is it a?", "weight": 1.0}]},
        {"checklist": [{"question": "Is it b?", "weight": 2.0}]},
    ]
    assert load_prompts(DataSpec(prompts=str(path)))[0].metadata == {}  # no checklist_field: none read
    missing = jsonl(tmp_path, [*good, {"prompt": "c"}], "missing.jsonl")
    with pytest.raises(DataError, match=r"missing.jsonl:3: column 'checklist' is missing"):
        load_prompts(DataSpec(prompts=str(missing), checklist_field="checklist"))
    bad = jsonl(tmp_path, [{"prompt": "c", "checks": {"q": 1}}], "bad.jsonl")
    with pytest.raises(DataError, match=r"bad.jsonl:1: column 'checks': expected a non-empty list"):
        load_prompts(DataSpec(prompts=str(bad), checklist_field="checks"))


def test_a_rollout_hands_its_prompts_checklist_to_the_judges():
    from grm.orchestrator.types import Rollout

    prompt = Prompt(id="p0", text="a", reference=None, metadata={"checklist": [{"question": "q", "weight": 1.0}]})
    r = Rollout(
        id="g/0", prompt=prompt, group="g", prompt_ids=[], token_ids=[], text="x", logprobs=[], finish_reason="stop", version=0
    )
    s = r.sample()
    assert s.metadata == {"checklist": [{"question": "q", "weight": 1.0}]}
    s.metadata["anchor"] = "y"
    assert "anchor" not in prompt.metadata  # a judge's sample never writes into the prompt shared by the group


def test_eval_items_carry_a_mapped_checklist(tmp_path):
    from grm.judges.labelled import samples_for
    from grm.judges.runtime import load

    rows = [{"prompt": "p", "response": "r", "checklist": ["Is it r?"]}, {"prompt": "p2", "response": "r2"}]
    with pytest.raises(DataError, match=r"^src row 1: column 'checklist' is missing"):
        to_items(rows, {"prompt": "prompt", "response": "response", "checklist": "checklist"}, "src")
    items, _ = to_items(rows[:1], {"prompt": "prompt", "response": "response", "checklist": "checklist"}, "src")
    plain, _ = to_items(rows[:1], {"prompt": "prompt", "response": "response"}, "src")
    assert items[0].extra == {"checklist": [{"question": "Is it r?", "weight": 1.0}]} and plain[0].extra == {}
    assert items[0].input_hash != plain[0].input_hash  # another checklist is another input
    judge = load("builtin:checklist-data-logprob")
    (sample,) = samples_for(judge.spec, items[0])
    assert sample.metadata == items[0].extra and sample.response == "r"


def test_a_pipeline_with_a_data_checklist_judge_needs_the_checklist_column(tmp_path):
    (tmp_path / "p.jsonl").write_text('{"prompt": "hi", "checklist": ["Is it hi?"]}\n')
    text = """name: t
pools: {a: {cpus: 1}}
policy: {spec: builtin:smollm2-135m-instruct, pool: a}
judges:
  - {spec: builtin:checklist-data-logprob, pool: a}
data: {prompts: p.jsonl}
"""
    (tmp_path / "p.yaml").write_text(text)
    with pytest.raises(ConfigError, match=r"p.yaml:5: judge 'checklist-data-logprob' reads .* data.checklist_field is null"):
        load_pipeline(tmp_path / "p.yaml")
    (tmp_path / "p.yaml").write_text(text.replace("prompts: p.jsonl", "prompts: p.jsonl, checklist_field: checklist"))
    assert load_pipeline(tmp_path / "p.yaml").judges[0].spec.checklist.source == "data"


def test_grm_run_refuses_a_data_checklist_longer_than_the_judges_max_items_naming_the_row(tmp_path):
    rows = [{"prompt": "a", "checklist": ["Is it a?"]}, {"prompt": "b", "checklist": ["One?", "Two?", "Three?"]}]
    data = DataSpec(prompts=str(jsonl(tmp_path, rows)), checklist_field="checklist")
    judge = load_judge("builtin:checklist-data-logprob")
    short = load_judge("builtin:checklist-data-logprob", overrides=["checklist.max_items=2"])
    prompts = load_prompts(data)
    with pytest.raises(DataError, match=r"p.jsonl:2: column 'checklist': 3 questions, more than judge .*max_items is 2\)"):
        check_checklists(prompts, data, [short])
    check_checklists(prompts, data, [judge])  # the shipped judge asks up to 6
    check_checklists(
        prompts, data, [load_judge("builtin:checklist-logprob", overrides=["checklist.max_items=2"])]
    )  # writes its own


def test_pass_if_no_is_kept_and_a_wrong_value_is_refused_naming_the_item():
    got = read_checklist([{"question": "Does it use the word 'very'?", "pass_if": "no"}, "Is it short?"], "d.jsonl row 2")
    assert got == [
        {"question": "Does it use the word 'very'?", "weight": 1.0, "pass_if": "no"},
        {"question": "Is it short?", "weight": 1.0},  # "yes" passes: the default, left implicit
    ]
    assert read_checklist([{"question": "Is it short?", "pass_if": "yes"}], "r") == [{"question": "Is it short?", "weight": 1.0}]
    with pytest.raises(DataError, match=r"^d.jsonl row 2 item 0: 'pass_if' must be \"yes\" or \"no\".*'maybe'"):
        read_checklist([{"question": "Is it short?", "pass_if": "maybe"}], "d.jsonl row 2")
