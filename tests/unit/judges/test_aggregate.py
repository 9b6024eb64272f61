import pytest

from grm.judges.aggregate import combine_swap, majority, mean, mean_lists, median, top_k_mean, total, verdict_of


def test_skip_failed_samples():
    assert mean([8, None, 6]) == 7
    assert median([1, None, 9, 5]) == 5
    assert total([1, None, 2]) == 3
    assert mean([None, None]) is None and median([]) is None and total([None]) is None


def test_majority_on_margins():
    assert majority([1, 1, -1]) == 1
    assert majority([-1, -1, 1, None]) == -1
    assert majority([1, -1]) == 0  # split vote is a tie
    assert majority([0, 0, 1]) == 0
    assert majority([None]) is None


def test_mean_lists_and_meta_top_k():
    assert mean_lists([[1, 2], None, [3, 4]]) == [2, 3]
    assert mean_lists([None]) is None
    # ratings pick the two best-rated critiques: values 9 and 7 -> 8
    assert top_k_mean([9, 1, 7, None], [0.9, 0.1, 0.8, 1.0], k=2) == 8
    # an unrated sample still counts when fewer than k are rated
    assert top_k_mean([4, 6], [None, 0.5], k=2) == 5
    assert top_k_mean([None], [1.0], k=1) is None


# (original, swapped-mapped) -> expected under each policy; margins: +1 = response 1 preferred
CASES = [
    # orig, swap, combine, on_incons, verdict, agreement
    (1.0, 1.0, "verdict", "tie", "1", True),
    (-1.0, -1.0, "verdict", "tie", "2", True),
    (0.0, 0.0, "verdict", "tie", "tie", True),
    (1.0, -1.0, "verdict", "tie", "tie", False),
    (1.0, -1.0, "verdict", "mask", None, False),
    (1.0, 0.0, "verdict", "tie", "tie", False),
    (1.0, 0.0, "verdict", "mask", None, False),
    # one order failed: masked, never the other order alone (a position-biased reading)
    (1.0, None, "verdict", "mask", None, None),
    (None, -1.0, "verdict", "tie", None, None),
    (2.5, None, "margin", "tie", None, None),
    (None, 0.3, "margin", "mask", None, None),
    (None, None, "verdict", "tie", None, None),
    (1.0, 1.0, "margin", "tie", "1", True),
    (1.0, -1.0, "margin", "tie", "tie", False),
    (1.0, 0.0, "margin", "tie", "1", False),
    (2.5, -0.7, "margin", "mask", "1", False),  # log-odds: the stronger order wins
    (0.3, -1.2, "margin", "tie", "2", False),
    (None, None, "margin", "tie", None, None),
]


@pytest.mark.parametrize("orig,swap,combine,incons,verdict,agree", CASES)
def test_swap_combination_table(orig, swap, combine, incons, verdict, agree):
    v, m, a = combine_swap(orig, swap, combine=combine, on_inconsistent=incons)
    assert v == verdict and a == agree
    if combine == "margin" and orig is not None and swap is not None:
        assert m == pytest.approx(orig + swap)
    assert verdict_of(m) == (verdict if verdict is not None else None) or (m is None and verdict is None)
