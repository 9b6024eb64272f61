"""A run directory's metrics grouping and the sample browser's groups, filters, sorts and diffs."""

import pytest

from grm.view.run_dir import RunDir
from grm.view.run_metrics import flatten_numeric, group_keys, metric_group
from grm.view.sample_browser import word_diff
from tests.unit.view.synthetic import write_run


def test_every_numeric_key_is_grouped_by_prefix(tmp_path):
    run = RunDir(write_run(tmp_path / "run"))
    m = run.metrics()
    g = m["groups"]
    assert g["reward"] == ["reward_mean", "reward/helpfulness"]
    assert g["masked"] == ["masked"] and g["masked_by_judge"] == ["masked_by_judge/helpfulness"]
    assert g["judge_cost"] == ["judge_cost/helpfulness/tokens"]  # a key nobody told the viewer about
    assert "note" not in [k for ks in g.values() for k in ks] and "kl" not in g  # text and all-null keys
    assert m["rows"][1]["judge_cost/helpfulness/tokens"] == 200.0


def test_flatten_and_group_names():
    assert flatten_numeric({"a": True, "b": None, "c": {"d": 2}}) == {"a": 1.0, "b": None, "c/d": 2.0}
    for bad in (float("nan"), float("inf"), 10**400):  # the recorder writes NaN as null: these are no step's values
        with pytest.raises(ValueError, match="^c/b: "):
            flatten_numeric({"a": 1, "c": {"b": bad}})
    assert metric_group("seconds_rollout", {"seconds"}) == "seconds" and metric_group("seconds_rollout") == "seconds_rollout"
    assert metric_group("kl") == "kl" and metric_group("canary/x") == "canary"
    assert group_keys([{"step": 1, "kl": None}]) == {}


def test_sample_page_groups_filters_and_sorts(tmp_path):
    run = RunDir(write_run(tmp_path / "run", groups=3, size=3))
    assert run.steps() == [1, 2]
    page = run.sample_page(1)
    assert page["rows"] == 9 and page["groups_total"] == 3
    first = page["groups"][0]
    assert [r["reward"] for r in first["rows"]] == sorted((r["reward"] for r in first["rows"]), reverse=True)
    best = [r for r in first["rows"] if r["best"]]
    assert len(best) == 1 and best[0]["diff"] is None and all(r["diff"] for r in first["rows"] if not r["best"])
    masked = run.sample_page(1, filt="masked")
    (row,) = [r for g in masked["groups"] for r in g["rows"]]
    assert row["id"] == "s1-g0-1" and row["masked_reasons"] == [
        "helpfulness: masked (1 of 1 critiques unparsed)",
        "numeric-answer: no result (judge failed or timed out)",
    ]
    asc = run.sample_page(2, sort="length", desc=False)
    lengths = [r["length"] for r in asc["groups"][0]["rows"]]
    assert lengths == sorted(lengths)
    trunc = run.sample_page(2, filt="truncated")
    assert all(r["finish_reason"] == "length" for g in trunc["groups"] for r in g["rows"])
    assert run.sample_page(2, page=1, per_page=2)["groups"] and not run.sample_page(2, page=5)["groups"]


def test_word_diff_marks_inserted_and_deleted_words():
    d = word_diff("The answer is 13. Done.", "The answer is 12. Done.")
    assert ["delete", "13. "] in d and ["insert", "12. "] in d and d[0] == ["equal", "The answer is "]


def test_the_gate_result_is_read_for_the_page(tmp_path):
    """gate.json (written by ``grm run`` before the policy loads) reaches the page as one entry per
    judge; a run without one, or with a broken one, shows none."""
    import json

    path = write_run(tmp_path / "run")
    assert RunDir(path).metrics()["gate"] == []
    gate = {"judge": "format", "passed": False, "accuracy": 0.0, "ci95": [0.0, 0.0], "min_accuracy": 0.9, "pairs": 20}
    (path / "gate.json").write_text(json.dumps({"format": gate}))
    assert RunDir(path).metrics()["gate"] == [gate]
    (path / "gate.json").write_text("{not json")
    assert RunDir(path).metrics()["gate"] == []
