"""An eval directory's confusion, pair filters, presentations and the two-directory comparison."""

from grm.view.eval_dir import EvalDir, confusion, disagreements, keep_pair
from tests.unit.view.synthetic import write_eval


def test_summary_confusion_and_filter_counts(tmp_path):
    ev = EvalDir(write_eval(tmp_path / "ev"))
    s = ev.summary()
    j = s["judges"]["pairwise"]
    # labels 1, 2, 1; order 1 said 1, 2, masked; order 2 said 1, 1, 1
    assert j["confusion"]["order1"] == [[1, 0, 0, 1], [0, 1, 0, 0]]
    assert j["confusion"]["order2"] == [[2, 0, 0, 0], [1, 0, 0, 0]]
    assert j["confusion"]["combined"] == [[1, 0, 0, 1], [1, 0, 0, 0]]
    assert j["counts"] == {"all": 3, "wrong": 2, "disagree": 2, "longer_wins": 0, "shorter_preferred": 1, "masked": 1}
    assert s["metrics"]["judges"]["pairwise"]["pairs"]["accuracy_average"] == 0.5


def test_pair_page_has_texts_and_both_orders(tmp_path):
    ev = EvalDir(write_eval(tmp_path / "ev"))
    page = ev.pair_page("pairwise", filt="disagree")
    assert page["total"] == 2 and page["note"] == ""
    p = page["pairs"][0]
    assert p["item_id"] == "i1" and p["prompt"] == "Say hi" and p["responses"] == ["hi", "hello there friend"]
    titles = [x["title"] for x in p["presentations"]]
    assert titles == ["order 1: A = response 1, B = response 2", "order 2: A = response 2, B = response 1"]
    assert [x["verdict"] for x in p["presentations"]] == ["2", "1"]
    assert p["presentations"][1]["critiques"][0]["text"].endswith("(order 2)")


def test_texts_unavailable_is_a_note(tmp_path):
    """An eval directory written before grm eval recorded items.jsonl shows its judgments without
    texts and says why; the data path its config names (here still readable) is never opened."""
    path = write_eval(tmp_path / "ev")
    (path / "items.jsonl").unlink()
    page = EvalDir(path).pair_page("pairwise")
    assert page["total"] == 3 and "no items.jsonl" in page["note"] and page["pairs"][0]["prompt"] is None
    assert "Say hi" not in str(page)


def test_filters_on_lengths():
    line = {"label": 2, "verdict": "1", "order_verdicts": ["1", "1"], "lengths": [10, 3]}
    assert keep_pair(line, "longer_wins") and keep_pair(line, "shorter_preferred") and keep_pair(line, "wrong")
    assert not keep_pair(line, "disagree") and not keep_pair({**line, "lengths": [3, 3]}, "longer_wins")
    assert confusion([])["order1"] == [[0, 0, 0, 0], [0, 0, 0, 0]]


def test_disagreements_between_two_eval_dirs(tmp_path):
    a = EvalDir(write_eval(tmp_path / "a"))
    b = EvalDir(write_eval(tmp_path / "b", [("1", ["1", "1"]), ("2", ["2", "2"]), ("1", ["1", "1"])], judge="other"))
    d = disagreements(a, "pairwise", b, "other")
    assert d["common"] == 3 and d["total"] == 2
    assert [x["a"]["item_id"] for x in d["pairs"]] == ["i1", "i2"] and d["pairs"][0]["b"]["verdict"] == "2"
