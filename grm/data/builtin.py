"""Built-in evaluation and prompt sets that need no download: generated from a seed.

``arith-pairs``: objective preference pairs — an arithmetic question, the correct worked answer
and a plausible wrong one (carry slip, off-by-one, operand swap), label = the correct side, which
alternates so a judge that always picks one position scores 50%.
``arith-prompts``: arithmetic questions with reference answers, for RL pipelines and verifiers.
``constraints-train`` / ``constraints-heldout``: instruction-following prompts with verifiable
constraints, disjoint splits (``grm.data.constraints``); ``constraints-pairs``: a following and a
breaking response per held-out prompt (``grm.data.constraint_pairs``); ``constraints-pairs-train`` the
same over training prompts (a judge's training pairs). ``constraints-lexical-dev`` (and its pairs):
the training side's check set; ``constraints-lexical-unseen``: held-out topics, task templates and
vocabulary (``grm.data.constraints``).
``constraints-quick-train`` / ``constraints-quick-heldout`` / ``constraints-quick-pairs``: the
quickstart's one-word-to-include prompts, held-out topics, task templates and words, and pairs over
the training prompts (where its judge is chosen).
``calc-train`` / ``calc-heldout``: arithmetic word problems for the ``calc`` environment's episodes,
disjoint splits (``grm.data.calc_tasks``); each row names the seed the environment starts from.
``clarify-train`` / ``clarify-heldout``: under-specified requests for the ``clarify`` environment's
dialogues, disjoint splits (``grm.data.clarify_tasks``); rows as for ``calc``.
``revise-train`` / ``revise-heldout``: writing tasks with a follow-up request for the ``revise``
environment's dialogues, disjoint splits (``grm.data.revise_tasks``); rows as for ``calc``.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from functools import partial
from typing import Any

from grm.data import clarify_tasks, revise_tasks
from grm.data.calc_tasks import prompt_rows
from grm.data.constraint_pairs import constraints_pairs
from grm.data.constraints import (
    constraints_heldout,
    constraints_lexical_dev,
    constraints_lexical_unseen,
    constraints_quick,
    constraints_train,
)

SETS: dict[str, Callable[[], list[dict[str, Any]]]] = {}
"""``builtin:NAME`` -> a function that generates the set with its default size and seed."""


def _question(rng: random.Random) -> tuple[str, int, str]:
    op = rng.choice(["+", "-", "*"])
    if op == "*":
        a, b = rng.randint(3, 19), rng.randint(3, 12)
        ans = a * b
    elif op == "+":
        a, b = rng.randint(12, 99), rng.randint(12, 99)
        ans = a + b
    else:
        a, b = rng.randint(40, 99), rng.randint(11, 39)
        ans = a - b
    return f"What is {a} {op} {b}?", ans, f"{a} {op} {b}"


def _wrong(rng: random.Random, ans: int) -> int:
    kind = rng.choice(["off-by-one", "tens", "digits"])
    if kind == "off-by-one":
        return ans + rng.choice([-1, 1])
    if kind == "tens":
        return ans + rng.choice([-10, 10])
    s = str(ans)
    if len(s) >= 2 and s[-1] != s[-2]:
        return int(s[:-2] + s[-1] + s[-2])
    return ans + 2


def arith_pairs(n: int = 200, seed: int = 0) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        q, ans, expr = _question(rng)
        wrong = _wrong(rng, ans)
        good = f"{expr} = {ans}. The answer is {ans}."
        bad = f"{expr} = {wrong}. The answer is {wrong}."
        label = 1 if i % 2 == 0 else 2
        out1, out2 = (good, bad) if label == 1 else (bad, good)
        rows.append({"id": f"arith-{i}", "input": q, "output_1": out1, "output_2": out2, "label": label, "reference": str(ans)})
    return rows


def arith_prompts(n: int = 256, seed: int = 0) -> list[dict[str, Any]]:
    rng = random.Random(seed + 1)
    rows = []
    for i in range(n):
        q, ans, _ = _question(rng)
        rows.append(
            {"id": f"arith-prompt-{i}", "prompt": f"{q} Think briefly, then end with 'The answer is N.'", "reference": str(ans)}
        )
    return rows


SETS["arith-pairs"] = arith_pairs
SETS["arith-prompts"] = arith_prompts
SETS["calc-train"] = partial(prompt_rows, "train", 2000)
SETS["calc-heldout"] = partial(prompt_rows, "held_out", 500)
SETS["clarify-train"] = partial(clarify_tasks.prompt_rows, "train", 2000)
SETS["clarify-heldout"] = partial(clarify_tasks.prompt_rows, "held_out", 500)
SETS["revise-train"] = partial(revise_tasks.prompt_rows, "train", 2000)
SETS["revise-heldout"] = partial(revise_tasks.prompt_rows, "held_out", 500)
SETS["constraints-train"] = constraints_train
SETS["constraints-heldout"] = constraints_heldout
SETS["constraints-pairs"] = constraints_pairs
# The same task with the constraints a small judge can read without counting (constraints.LEXICAL).
SETS["constraints-lexical-train"] = partial(constraints_train, lexical=True)
SETS["constraints-lexical-heldout"] = partial(constraints_heldout, lexical=True)
SETS["constraints-lexical-pairs"] = partial(constraints_pairs, lexical=True)
# The training side's check set and a held-out set sharing nothing with training but the constraint
# kinds (held-out topics, task templates and vocabulary): the pre-registered learning curve's splits.
SETS["constraints-lexical-dev"] = constraints_lexical_dev
SETS["constraints-lexical-unseen"] = constraints_lexical_unseen
SETS["constraints-lexical-dev-pairs"] = partial(constraints_pairs, lexical=True, split="dev")
# Pairs over the training prompts (other topics): what a judge is trained on (pipelines/judge-grpo.yaml).
SETS["constraints-pairs-train"] = partial(constraints_pairs, 512, split="train")
SETS["constraints-lexical-pairs-train"] = partial(constraints_pairs, 512, lexical=True, split="train")
# The quickstart's task: one word to include per prompt (constraints.QUICK); its
# judge is chosen on pairs over its training prompts, its before/after check uses held-out topics.
SETS["constraints-quick-train"] = partial(constraints_quick, "train", 512)
SETS["constraints-quick-heldout"] = partial(constraints_quick, "heldout", 200)
SETS["constraints-quick-pairs"] = partial(constraints_pairs, 200, lexical=True, split="quick")

DEFAULT_MAPS: dict[str, dict[str, str]] = {
    "arith-pairs": {
        "prompt": "input",
        "response_a": "output_1",
        "response_b": "output_2",
        "label": "label",
        "reference": "reference",
        "id": "id",
    },
    "arith-prompts": {"prompt": "prompt", "reference": "reference", "id": "id"},
    "constraints-pairs": {
        "prompt": "input",
        "response_a": "output_1",
        "response_b": "output_2",
        "label": "label",
        "id": "id",
        "checklist": "checklist",
        "constraints": "constraints",
    },
    "constraints-train": {"prompt": "prompt", "id": "id", "checklist": "checklist", "constraints": "constraints"},
    "constraints-heldout": {"prompt": "prompt", "id": "id", "checklist": "checklist", "constraints": "constraints"},
}
DEFAULT_MAPS["constraints-pairs-train"] = DEFAULT_MAPS["constraints-pairs"]
for _split in ("train", "heldout", "pairs", "pairs-train"):
    DEFAULT_MAPS[f"constraints-lexical-{_split}"] = DEFAULT_MAPS[f"constraints-{_split}"]
for _split in ("dev", "unseen"):
    DEFAULT_MAPS[f"constraints-lexical-{_split}"] = DEFAULT_MAPS["constraints-train"]
for _split in ("train", "heldout"):
    DEFAULT_MAPS[f"constraints-quick-{_split}"] = DEFAULT_MAPS["constraints-train"]
DEFAULT_MAPS["constraints-quick-pairs"] = DEFAULT_MAPS["constraints-pairs"]
DEFAULT_MAPS["constraints-lexical-dev-pairs"] = DEFAULT_MAPS["constraints-pairs"]
