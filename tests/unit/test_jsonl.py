"""``grm.jsonl.json_safe``: what every JSON writer of grm passes its rows through. It mends what JSON
cannot hold (NaN, lone surrogates) exactly as the plain recursive definition does, at any depth
without a stack frame per level, and refuses a value nested past ``MAX_JSON_DEPTH`` (or a cycle)
with a ValueError saying so, never a RecursionError out of the writer."""

import json
import math
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grm.jsonl import MAX_JSON_DEPTH, append_jsonl, json_safe, read_jsonl, without_lone_surrogates


def reference(x):
    """The plain recursive definition (what json_safe was): two stack frames per level."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, str):
        return without_lone_surrogates(x)
    if isinstance(x, dict):
        return {without_lone_surrogates(k) if isinstance(k, str) else k: reference(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [reference(v) for v in x]
    return x


TEXT = st.one_of(st.text(max_size=6), st.sampled_from(["\ud800", "a\udc00b", "\udbff\udfff", "\ufffd", "x"]))
LEAVES = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), TEXT)
VALUES = st.recursive(
    LEAVES,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(inner, max_size=3).map(tuple),
        st.dictionaries(st.one_of(TEXT, st.integers(-3, 3)), inner, max_size=4),
    ),
    max_leaves=30,
)


@settings(max_examples=400, deadline=None)
@given(VALUES)
def test_json_safe_is_the_recursive_definition_key_order_and_all(value):
    got = json_safe(value)
    want = reference(value)
    assert json.dumps(got, ensure_ascii=False) == json.dumps(want, ensure_ascii=False)  # order of keys included
    json.dumps(got, ensure_ascii=False, allow_nan=False).encode("utf-8")  # no NaN, no lone surrogate


def test_non_finite_floats_and_lone_surrogates_are_mended_and_tuples_become_lists():
    value = {"a": float("nan"), "b\ud800": (1, float("-inf"), "x\udc00"), 3: [True, None, 2.5]}
    assert json_safe(value) == {"a": None, "b\ufffd": [1, None, "x\ufffd"], 3: [True, None, 2.5]}
    # two keys that become one: the last wins, as in the dict the recursive definition built
    assert json_safe(dict([("\ud800", 1), ("\udc00", 2)])) == {"\ufffd": 2}


def nested(depth: int, leaf=0):
    value = leaf
    for i in range(depth):
        value = [value] if i % 2 else {"k": value}
    return value


def test_a_value_at_the_depth_bound_is_written_and_read_back(tmp_path):
    row = nested(MAX_JSON_DEPTH - 1, float("nan"))  # the row itself is level 1
    append_jsonl(tmp_path / "a.jsonl", [{"row": row}])
    assert read_jsonl(tmp_path / "a.jsonl") == [{"row": nested(MAX_JSON_DEPTH - 1, None)}]


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 5_000, 200_000])
def test_a_value_nested_past_the_bound_is_a_value_error_saying_so_never_a_recursion_error(depth, tmp_path):
    """500 levels of a policy's tool-call arguments took 1,000 frames in the recursive json_safe:
    a RecursionError out of the sample writer, which ended the run."""
    value = nested(depth)
    limit, frames, f = sys.getrecursionlimit(), 0, sys._getframe()
    while f is not None:
        frames, f = frames + 1, f.f_back
    sys.setrecursionlimit(frames + 50)  # json_safe takes no frame per level: 50 more than the test's are plenty
    try:
        with pytest.raises(ValueError, match=f"nested more than {MAX_JSON_DEPTH} levels deep"):
            json_safe(value)
    finally:
        sys.setrecursionlimit(limit)
    with pytest.raises(ValueError, match="nested more than"):
        append_jsonl(tmp_path / "a.jsonl", [{"row": value}])


def test_a_cycle_is_a_value_error_not_a_hang():
    loop: list = []
    loop.append(loop)
    with pytest.raises(ValueError, match="nested more than"):
        json_safe({"x": loop})


def test_a_lone_surrogate_is_found_at_any_depth_without_recursion(tmp_path):
    from grm.jsonl import JsonlError, lone_surrogate, read_jsonl

    deep: object = "\ud800"
    for _ in range(5000):
        deep = [deep]
    assert lone_surrogate(deep) and lone_surrogate({"k": {"\udfff": 1}}) and not lone_surrogate([[["ok"]]])
    path = tmp_path / "r.jsonl"
    path.write_text('{"a": ' + "[" * 900 + '"\\ud800"' + "]" * 900 + "}\n")  # deeper than json_safe writes
    with pytest.raises(JsonlError, match=r"r.jsonl:1: .*surrogate"):  # refused by its line, never a RecursionError
        read_jsonl(path)


def test_a_batch_with_a_row_that_cannot_be_written_writes_none_of_it(tmp_path):
    path = tmp_path / "r.jsonl"
    append_jsonl(path, [{"a": 1}])
    deep: object = 1
    for _ in range(MAX_JSON_DEPTH + 5):
        deep = [deep]
    with pytest.raises(ValueError, match="nested more than"):
        append_jsonl(path, [{"b": 2}, {"deep": deep}])
    assert read_jsonl(path) == [{"a": 1}]  # not the batch's first row without the rest
