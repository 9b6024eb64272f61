"""Constraint prompts (``builtin:constraints-train``/``-heldout``): deterministic by seed, disjoint
splits, compatible constraints; the ``constraints`` cell checked when the data loads, naming the
row, and carried to judges in pipelines and in ``grm eval``."""

import json

import pytest

from grm.config.pipeline import DataSpec
from grm.data import constraints as C
from grm.data.constraint_cell import read_constraints
from grm.data.errors import DataError
from grm.data.items import default_map, to_items
from grm.data.prompts import load_prompts
from grm.data.sources import load_rows


def test_generation_is_deterministic_by_seed():
    assert C.constraints_train(64, seed=3) == C.constraints_train(64, seed=3)
    assert C.constraints_heldout(32, seed=3) == C.constraints_heldout(32, seed=3)
    assert [r["prompt"] for r in C.constraints_train(64, seed=3)] != [r["prompt"] for r in C.constraints_train(64, seed=4)]
    assert load_rows("builtin:constraints-train") == C.constraints_train()  # the shipped set is the default seed


def test_default_sizes_and_row_columns():
    train, held = load_rows("builtin:constraints-train"), load_rows("builtin:constraints-heldout")
    assert (len(train), len(held)) == (512, 200)
    for row in train + held:
        assert {"id", "prompt", "constraints", "checklist"} <= set(row)
        assert 1 <= len(row["constraints"]) <= 3 and len(row["checklist"]) == len(row["constraints"])
        assert read_constraints(row["constraints"], "row") == row["constraints"]  # generated rows are valid cells
        for c, q in zip(row["constraints"], row["checklist"], strict=True):
            assert C.instruction(c) in row["prompt"] and q == C.checklist_item(c)
            if c["type"] in C.PASSED_BY_NO:  # asked about presence: "No" passes
                assert q == {"question": C.question(c), "pass_if": "no"} and q["question"].endswith("?")
            else:
                assert q == C.question(c) and q.endswith("?")
    assert len({r["id"] for r in train + held}) == len(train) + len(held)
    assert len({r["prompt"] for r in train}) == len(train)  # no repeated prompt inside a split


@pytest.mark.parametrize("seed", [0, 1, 7])
def test_splits_are_disjoint(seed):
    train, held = C.constraints_train(seed=seed), C.constraints_heldout(seed=seed)
    assert not {r["prompt"] for r in train} & {r["prompt"] for r in held}
    assert not set(C.TRAIN_TOPICS) & set(C.HELDOUT_TOPICS)
    assert {r["topic"] for r in held} <= set(C.HELDOUT_TOPICS) and {r["topic"] for r in train} <= set(C.TRAIN_TOPICS)
    # the docstring's guarantee: no text of one split names a topic of the other
    assert not [t for r in held for t in C.TRAIN_TOPICS if t in r["prompt"]]
    assert not [t for r in train for t in C.HELDOUT_TOPICS if t in r["prompt"]]


def test_drawn_constraints_are_compatible_and_every_type_is_used():
    rows = C.constraints_train()
    seen = set()
    for row in rows:
        types = [c["type"] for c in row["constraints"]]
        seen |= set(types)
        assert all(C.compatible(a, b) for i, a in enumerate(types) for b in types[i + 1 :]), types
    assert seen == set(C.ARGS)
    assert not C.compatible("json_key", "bullets") and not C.compatible("bullets", "json_key")
    assert set(C.INSTRUCTIONS) == set(C.QUESTIONS) == set(C.ARGS)


def test_keywords_never_collide_with_the_words_of_prompts():
    """A keyword or forbidden word written in a task or topic would make the constraint trivial or
    impossible to follow while restating the task."""
    import re

    texts = " ".join(C.TASKS + C.TOPICS).lower()
    for w in C.VALUES["keyword"] + C.VALUES["forbidden_word"]:
        assert not re.search(rf"\b{w}\b", texts), w


@pytest.mark.parametrize(
    "value, message",
    [
        (None, "is missing; expected a non-empty list of constraints"),
        ([], "expected a non-empty list"),
        ("lowercase", "text that is not a JSON list"),
        ([{"n": 3}], r"item 0: unknown constraint type None"),
        ([{"type": "shout"}], r"item 0: unknown constraint type 'shout'; known: lowercase"),
        ([{"type": "max_words"}], r"item 0: 'max_words' needs 'n', a whole number >= 1; found None"),
        ([{"type": "max_words", "n": "40"}], r"'n', a whole number >= 1; found '40'"),
        ([{"type": "bullets", "n": True}], r"'n', a whole number >= 1; found True"),
        ([{"type": "keyword", "word": " "}], r"'keyword' needs 'word', a non-empty string"),
        ([{"type": "lowercase", "n": 2}], r"'lowercase' takes no arguments, not \['n'\]"),
        ([{"type": "lowercase"}, {"type": "lowercase"}], r"\['lowercase'\] occur more than once"),
        (["lowercase"], "item 0: expected an object with 'type'"),
    ],
)
def test_read_constraints_says_what_is_wrong(value, message):
    with pytest.raises(DataError, match=r"^f row 3: column 'c'.*" + message):
        read_constraints(value, "f row 3: column 'c'")


def test_read_constraints_accepts_json_text_and_strips_phrases():
    cell = json.dumps([{"type": "end_phrase", "phrase": " Bye. "}, {"type": "max_words", "n": 9}])
    assert read_constraints(cell, "x") == [{"type": "end_phrase", "phrase": "Bye."}, {"type": "max_words", "n": 9}]


def test_pipeline_prompts_carry_constraints_and_a_malformed_row_is_named(tmp_path):
    rows = [{"prompt": "a", "constraints": [{"type": "lowercase"}]}, {"prompt": "b", "constraints": [{"type": "max_words"}]}]
    path = tmp_path / "p.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(DataError, match=r"p.jsonl:2: column 'constraints' item 0: 'max_words' needs 'n'"):
        load_prompts(DataSpec(prompts=str(path), constraints_field="constraints"))
    (first,) = load_prompts(DataSpec(prompts=str(path), constraints_field="constraints", limit=1))
    assert first.metadata == {"constraints": [{"type": "lowercase"}]}
    assert load_prompts(DataSpec(prompts=str(path)))[0].metadata == {}  # no constraints_field: none read
    shipped = load_prompts(
        DataSpec(prompts="builtin:constraints-train", checklist_field="checklist", constraints_field="constraints")
    )
    assert set(shipped[0].metadata) == {"checklist", "constraints"}


def test_eval_items_carry_constraints_automatically(tmp_path):
    rows = [{"prompt": "p", "response": "r", "constraints": [{"type": "no_commas"}]}]
    mapping = default_map("x.jsonl", set(rows[0]))
    assert mapping["constraints"] == "constraints"  # a column named constraints is mapped without --map
    items, _ = to_items(rows, mapping, "src")
    assert items[0].extra == {"constraints": [{"type": "no_commas"}]}
    plain, _ = to_items(rows, {"prompt": "prompt", "response": "response"}, "src")
    assert items[0].input_hash != plain[0].input_hash
    with pytest.raises(DataError, match=r"^src row 0: column 'constraints' item 0: unknown constraint type 'x'"):
        to_items([{"prompt": "p", "response": "r", "constraints": [{"type": "x"}]}], mapping, "src")
    llmbar = {"input", "output_1", "output_2", "label", "constraints"}
    assert default_map("pairs.jsonl", llmbar)["constraints"] == "constraints"


def test_a_pipeline_with_the_constraints_verifier_needs_the_constraints_column(tmp_path):
    from grm.config import ConfigError
    from grm.config.resolve import load_pipeline

    text = """name: t
pools: {a: {cpus: 1}}
policy: {spec: builtin:smollm2-135m-instruct, pool: a}
judges:
  - {spec: builtin:constraints}
data: {prompts: builtin:constraints-train}
"""
    (tmp_path / "p.yaml").write_text(text)
    with pytest.raises(ConfigError, match=r"p.yaml:5: judge 'constraints' verifies .* data.constraints_field is null"):
        load_pipeline(tmp_path / "p.yaml")
    (tmp_path / "p.yaml").write_text(text.replace("constraints-train}", "constraints-train, constraints_field: constraints}"))
    assert load_pipeline(tmp_path / "p.yaml").judges[0].spec.rule.type == "constraints"


def test_the_unseen_split_shares_nothing_with_training_but_the_constraint_kinds():
    """``constraints-lexical-unseen``: held-out topics, task templates and vocabulary; the dev split
    is the training side's own (its topics, tasks, vocabulary), none of its texts a training text."""
    import re

    from grm.data.builtin import SETS

    train, dev, unseen = (SETS[f"constraints-lexical-{s}"]() for s in ("train", "dev", "unseen"))
    vocab = lambda rows: {v for r in rows for c in r["constraints"] for k, v in c.items() if k != "type"}  # noqa: E731
    assert not vocab(train) & vocab(unseen) and vocab(unseen) <= {v for vs in C.UNSEEN_VALUES.values() for v in vs}
    assert vocab(dev) <= {v for vs in C.VALUES.values() for v in vs}
    assert {r["topic"] for r in unseen} <= set(C.HELDOUT_TOPICS) and {r["topic"] for r in dev} <= set(C.TRAIN_TOPICS)
    task_of = lambda r: r["prompt"][: r["prompt"].index(r["topic"])]  # noqa: E731
    unseen_starts = {t[: t.index("{topic}")] for t in C.UNSEEN_TASKS}
    train_starts = {t[: t.index("{topic}")] for t in C.TASKS}
    assert {task_of(r) for r in unseen} <= unseen_starts and {task_of(r) for r in train} <= train_starts
    assert not unseen_starts & train_starts
    assert not {r["prompt"] for r in train} & {r["prompt"] for r in dev}
    texts = " ".join(C.TASKS + C.UNSEEN_TASKS + C.TOPICS).lower()
    for w in C.UNSEEN_VALUES["keyword"] + C.UNSEEN_VALUES["forbidden_word"]:
        assert not re.search(rf"\b{w}\b", texts), w
