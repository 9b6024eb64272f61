"""Evaluation runner pieces that need no model."""

from grm.config import JudgeSpec
from grm.evaluation.runner import both_orders


def test_both_orders_forces_swap_on_pairwise_judges_only():
    pair = JudgeSpec(name="p", mode="pairwise", model="m", template="p.j2", parser={"type": "verdict"})
    swapped = both_orders(pair)
    assert swapped.position.swap is True and pair.position.swap is False  # a copy; the loaded spec is untouched
    assert both_orders(swapped) is swapped
    point = JudgeSpec(name="s", mode="pointwise", model="m", template="t.j2")
    assert both_orders(point) is point
