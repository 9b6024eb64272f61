"""``builtin:constraints-pairs``: every following response follows every constraint and every
breaking one breaks exactly the one it names, by the rule checkers; lengths do not give it away."""

from collections import Counter

from grm.data.constraint_pairs import constraints_pairs, length_stats
from grm.data.constraints import constraints_heldout
from grm.data.items import default_map, to_items
from grm.data.sources import load_rows
from grm.judges.instructions import check_all


def test_every_pair_is_verified_by_the_checkers():
    rows = load_rows("builtin:constraints-pairs")
    held = {r["prompt"] for r in constraints_heldout()}
    assert len(rows) == 200  # one pair per held-out prompt
    for r in rows:
        assert r["input"] in held
        good, bad = r[f"output_{r['label']}"], r[f"output_{3 - r['label']}"]
        assert set(check_all(r["constraints"], good).values()) == {1.0}, (r["id"], good)
        failed = [t for t, ok in check_all(r["constraints"], bad).items() if not ok]
        assert failed == [r["broken"]], (r["id"], failed, bad)


def test_labels_alternate_and_which_constraint_breaks_varies():
    rows = constraints_pairs()
    assert [r["label"] for r in rows[:4]] == [1, 2, 1, 2]
    assert Counter(r["label"] for r in rows) == {1: 100, 2: 100}
    broken = Counter(r["broken"] for r in rows)
    assert len(broken) == 14 and max(broken.values()) < 0.2 * len(rows)  # every type, none dominating


def test_the_longer_response_is_no_hint():
    stats = length_stats(constraints_pairs())
    assert 0.4 <= stats["pass_longer"] <= 0.6, stats  # "pick the longer" stays near chance


def test_deterministic_and_mapped_for_grm_eval():
    assert constraints_pairs(20, seed=2) == constraints_pairs(20, seed=2)
    rows = constraints_pairs(8)
    items, _ = to_items(rows, default_map("builtin:constraints-pairs", set(rows[0])), "builtin:constraints-pairs")
    assert items[0].kind == "pair" and items[0].label == 1
    assert set(items[0].extra) == {"checklist", "constraints"}


def test_the_lexical_sets_hold_only_constraints_read_without_counting():
    """``constraints-lexical-*``: the same task over ``LEXICAL`` types only, still disjoint by split,
    its pairs still verified by the checkers and still no length hint."""
    from grm.data.constraints import LEXICAL

    train, held = load_rows("builtin:constraints-lexical-train"), load_rows("builtin:constraints-lexical-heldout")
    assert (len(train), len(held)) == (512, 200)
    assert not {r["prompt"] for r in train} & {r["prompt"] for r in held}
    assert {c["type"] for r in train + held for c in r["constraints"]} == set(LEXICAL)
    pairs = load_rows("builtin:constraints-lexical-pairs")
    assert len(pairs) == 200 and {r["input"] for r in pairs} <= {r["prompt"] for r in held}
    assert set(Counter(r["broken"] for r in pairs)) == set(LEXICAL)
    for r in pairs:
        good, bad = r[f"output_{r['label']}"], r[f"output_{3 - r['label']}"]
        assert set(check_all(r["constraints"], good).values()) == {1.0}, (r["id"], good)
        assert [t for t, ok in check_all(r["constraints"], bad).items() if not ok] == [r["broken"]], r["id"]
    assert 0.4 <= length_stats(pairs)["pass_longer"] <= 0.6
    assert constraints_pairs(12, seed=3, lexical=True) == constraints_pairs(12, seed=3, lexical=True)


def test_training_and_dev_pairs_are_verified_and_come_from_their_own_prompts():
    from grm.data.constraints import constraints_lexical_dev, constraints_quick, constraints_train

    for name, source in (
        ("constraints-lexical-pairs-train", constraints_train(512, lexical=True)),
        ("constraints-lexical-dev-pairs", constraints_lexical_dev()),
        ("constraints-quick-pairs", constraints_quick("train", 200)),  # the quickstart's judge is chosen on these
    ):
        rows = load_rows(f"builtin:{name}")
        prompts = {r["prompt"] for r in source}
        assert len(rows) >= 0.9 * len(prompts) and all(r["input"] in prompts for r in rows), name
        for r in rows:
            good, bad = r[f"output_{r['label']}"], r[f"output_{3 - r['label']}"]
            assert set(check_all(r["constraints"], good).values()) == {1.0}, (r["id"], good)
            assert [t for t, ok in check_all(r["constraints"], bad).items() if not ok] == [r["broken"]], r["id"]


def test_the_quickstart_split_asks_for_one_word_and_its_held_out_side_shares_no_topic_task_or_word():
    from grm.data.constraints import HELDOUT_TOPICS, TRAIN_TOPICS, UNSEEN_TASKS, UNSEEN_VALUES, VALUES

    train, held = load_rows("builtin:constraints-quick-train"), load_rows("builtin:constraints-quick-heldout")
    assert (len(train), len(held)) == (512, 200)
    for rows, topics, words in ((train, TRAIN_TOPICS, VALUES["keyword"]), (held, HELDOUT_TOPICS, UNSEEN_VALUES["keyword"])):
        assert all(len(r["constraints"]) == 1 and r["constraints"][0]["type"] == "keyword" for r in rows)
        assert {r["topic"] for r in rows} <= set(topics) and {r["constraints"][0]["word"] for r in rows} <= set(words)
    assert not {r["constraints"][0]["word"] for r in train} & {r["constraints"][0]["word"] for r in held}
    assert all(any(r["prompt"].startswith(t.split("{topic}")[0]) for t in UNSEEN_TASKS) for r in held)
    assert not any(any(r["prompt"].startswith(t.split("{topic}")[0]) for t in UNSEEN_TASKS) for r in train)
