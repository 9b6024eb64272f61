"""A checklist's weights are finite numbers above 0 as a float holds them: anything else (a bool,
NaN, infinity, an integer too large for a float) is one ``DataError`` naming the item, never an
OverflowError; and a checklist's score stays finite whatever the valid weights."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from grm.data.checklists import read_checklist, short
from grm.data.errors import DataError
from grm.judges.checklist import checklist_score


@pytest.mark.parametrize("weight", [10**400, -(10**400), True, False, math.nan, math.inf, 0, -1, "1", None])
def test_a_bad_weight_is_refused_naming_the_item(weight):
    with pytest.raises(DataError, match=r"^row 3 item 1: 'weight' must be a number above 0"):
        read_checklist(["fine?", {"question": "q?", "weight": weight}], "row 3")


@given(st.one_of(st.integers(), st.floats(allow_nan=True, allow_infinity=True), st.booleans()))
def test_any_number_is_accepted_or_refused_never_a_crash(weight):
    try:
        [item] = read_checklist([{"question": "q?", "weight": weight}], "w")
    except DataError:
        return
    assert math.isfinite(item["weight"]) and item["weight"] > 0


def test_short_names_an_integer_past_pythons_printing_limit():
    assert "digits" in short(10**5000)


@given(st.lists(st.floats(min_value=1e-300, max_value=1.7e308), min_size=1, max_size=8))
def test_a_checklist_score_is_finite_whatever_the_weights(weights):
    answers = [{"question": "q", "weight": w, "p_yes": 0.5} for w in weights]
    score = checklist_score(answers)
    assert score is not None and math.isfinite(score) and 0.0 <= score <= 1.0
