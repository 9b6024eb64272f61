"""Instruction-following prompts with verifiable constraints (``builtin:constraints-train``,
``builtin:constraints-heldout``); the ``constraints`` cell that carries them is read by ``grm.data.constraint_cell``.

A prompt is an everyday task about a topic ("Give a few practical tips for repotting a cactus.")
followed by one to three mutually compatible constraints, each stated as one instruction sentence
("Answer in at most 40 words."). A row holds ``id``, ``prompt``, ``constraints`` (``[{"type":
"max_words", "n": 40}, ...]``, what the rule checkers of ``grm.judges.instructions`` verify) and
``checklist`` (one yes/no question per constraint, what a checklist judge reads as P(yes)).

Train and held-out are disjoint by construction: every topic belongs to exactly one split (every
fourth topic of ``TOPICS`` is held out) and every prompt text contains its topic verbatim, with
topics written so that no held-out text contains a training topic or the reverse
(``tests/unit/data/test_constraints.py`` checks that for several seeds, and that no prompt text
occurs in both splits). Generation is deterministic by seed; within a split a drawn prompt whose
text was already drawn is skipped, so texts are unique.
"""

from __future__ import annotations

import random
import re
from typing import Any

METADATA_KEY = "constraints"
"""Where a sample's constraints travel to rule verifiers: ``Sample.metadata["constraints"]``."""

ARGS: dict[str, dict[str, type]] = {
    "lowercase": {},
    "max_words": {"n": int},
    "min_words": {"n": int},
    "bullets": {"n": int},
    "keyword": {"word": str},
    "forbidden_word": {"word": str},
    "end_phrase": {"phrase": str},
    "start_phrase": {"phrase": str},
    "no_commas": {},
    "json_key": {"key": str},
    "paragraphs": {"n": int},
    "max_sentences": {"n": int},
    "title": {},
    "postscript": {},
}
"""Every constraint type and the arguments it takes (all required, no others)."""

INSTRUCTIONS: dict[str, str] = {
    "lowercase": "Write your entire response in lowercase letters; no capital letters are allowed.",
    "max_words": "Answer in at most {n} words.",
    "min_words": "Your response should be at least {n} words long.",
    "bullets": "Your response must contain exactly {n} bullet points, each on its own line starting with '* ' or '- '.",
    "keyword": 'Include the word "{word}" somewhere in your response.',
    "forbidden_word": 'Do not use the word "{word}" anywhere in your response.',
    "end_phrase": 'End your response with the exact phrase "{phrase}" and write nothing after it.',
    "start_phrase": 'Begin your response with the exact words "{phrase}".',
    "no_commas": "Do not use any commas in your response.",
    "json_key": 'Format your entire response as a JSON object with a single key "{key}" whose value is your answer.',
    "paragraphs": "Write exactly {n} paragraphs, separated from each other by a blank line.",
    "max_sentences": "Use no more than {n} sentences.",
    "title": "Give your response a title wrapped in double angular brackets, like <<my title>>.",
    "postscript": 'At the end of your response, add a postscript that starts with "P.S."',
}
"""The sentence the prompt states each constraint with."""

QUESTIONS: dict[str, str] = {
    "lowercase": "Is the whole response written in lowercase letters, with no capital letters?",
    "max_words": "Is the response at most {n} words long?",
    "min_words": "Is the response at least {n} words long?",
    "bullets": "Does the response contain exactly {n} bullet points?",
    "keyword": 'Does the response include the word "{word}"?',
    "forbidden_word": 'Does the response use the word "{word}" anywhere?',
    "end_phrase": 'Does the response end with the exact phrase "{phrase}"?',
    "start_phrase": 'Does the response begin with the exact words "{phrase}"?',
    "no_commas": "Is the response free of commas?",
    "json_key": 'Is the whole response a JSON object with the single key "{key}"?',
    "paragraphs": "Does the response have exactly {n} paragraphs separated by blank lines?",
    "max_sentences": "Does the response use no more than {n} sentences?",
    "title": "Does the response have a title wrapped in double angular brackets, like <<title>>?",
    "postscript": 'Does the response end with a postscript starting with "P.S."?',
}
"""The checklist question for each constraint: the instruction asked as yes/no."""

_CONFLICTS = {
    ("max_words", "min_words"),
    ("min_words", "max_sentences"),
    ("keyword", "forbidden_word"),  # compatible in principle (different words), kept apart for clarity
    ("bullets", "json_key"),
    ("bullets", "paragraphs"),
    ("bullets", "max_sentences"),
    ("json_key", "paragraphs"),
    ("json_key", "max_sentences"),
    ("json_key", "title"),
    ("json_key", "postscript"),
    ("json_key", "start_phrase"),
    ("json_key", "end_phrase"),
    ("paragraphs", "title"),
    ("paragraphs", "postscript"),
    ("paragraphs", "max_sentences"),
    ("max_sentences", "postscript"),
    ("title", "start_phrase"),
    ("postscript", "end_phrase"),
}
"""Pairs never drawn together: contradictory (JSON only vs bullets, a start phrase vs a title
first), or ambiguous to count (is a title a paragraph? is "P.S." a sentence?)."""


def has_word(text: str, word: str) -> bool:
    """``word`` occurs in ``text`` as a whole word, any case (the ``keyword`` and ``forbidden_word``
    checks, and the ``revise`` environment's success)."""
    return re.search(rf"(?<!\w){re.escape(word.casefold())}(?!\w)", text.casefold()) is not None


def compatible(a: str, b: str) -> bool:
    return a != b and (a, b) not in _CONFLICTS and (b, a) not in _CONFLICTS


# Argument pools, shared by both splits: held-out prompts test new topics and new combinations,
# not new constraint kinds. Keywords and forbidden words never occur in topics, tasks or the
# sentences ``grm.data.constraint_pairs`` writes, so its responses control them exactly.
VALUES: dict[str, list[Any]] = {
    "max_words": [40, 60, 80],
    "min_words": [40, 60, 80],
    "bullets": [2, 3, 4, 5],
    "keyword": ["patience", "kindness", "routine", "weekend", "curiosity", "neighbor", "notebook", "sunlight", "laughter"],
    "forbidden_word": ["very", "really", "basically", "stuff", "actually", "literally", "awesome", "definitely"],
    "end_phrase": ["Is there anything else I can help with?", "Let me know how it goes.", "Happy to help."],
    "start_phrase": ["Here is my answer:", "In short:", "My suggestion:"],
    "json_key": ["answer", "response", "reply"],
    "paragraphs": [2, 3],
    "max_sentences": [2, 3, 4, 5],
}

TASKS = [
    "Write a short note to a friend about {topic}.",
    "Give a few practical tips for {topic}.",
    "Explain the basics of {topic} to a beginner.",
    "Describe what a good first week of {topic} looks like.",
    "Write a short blog post about {topic}.",
    "Suggest a simple plan for {topic}.",
    "List the main benefits of {topic}.",
    "Share some common mistakes people make when {topic}.",
    "Write an encouraging message to someone who is nervous about {topic}.",
    "Summarize what someone needs to know before {topic}.",
    "Describe how to get started with {topic} on a small budget.",
    "Write a short paragraph for a community newsletter about {topic}.",
    "Give advice to a teenager who is interested in {topic}.",
    "Explain how to make {topic} a regular habit.",
    "Compare doing {topic} alone and with others.",
    "Write a brief guide to {topic} for busy parents.",
]
"""Everyday tasks; ``{topic}`` is a gerund phrase."""

TOPICS = [
    "planning a picnic",
    "keeping houseplants alive",
    "learning to cook rice",
    "saving money on groceries",
    "training a puppy",
    "starting a vegetable garden",
    "organizing a closet",
    "preparing for a job interview",
    "riding a bike to work",
    "baking bread at home",
    "learning a second language",
    "hosting a board game night",
    "packing for a camping trip",
    "writing a thank you card",
    "cleaning a kitchen",
    "running a first 5k race",
    "choosing a good book",
    "making a weekly meal plan",
    "taking care of a cat",
    "decorating a small apartment",
    "learning to swim",
    "planting flowers in spring",
    "fixing a flat tire",
    "going on a road trip",
    "meditating every morning",
    "brewing tea",
    "moving to a new city",
    "volunteering at an animal shelter",
    "starting a book club",
    "sleeping better at night",
    "drawing with pencils",
    "visiting a museum with kids",
    "making friends as an adult",
    "reducing screen time",
    "recycling at home",
    "learning to play guitar",
    "painting a bedroom",
    "shopping for a used car",
    "walking in the mountains",
    "writing a diary",
    "cooking for a large family",
    "keeping a fish tank",
    "studying for an exam",
    "sewing on a button",
    "teaching a child to read",
    "building a bird feeder",
    "watching the stars",
    "making homemade soup",
    "waking up early",
    "writing a short poem",
    "caring for a lawn",
    "taking better photos with a phone",
    "preparing a birthday party",
    "learning to knit",
    "staying hydrated",
    "traveling by train",
    "composting kitchen scraps",
    "stretching after exercise",
    "planning a family reunion",
    "fishing at a lake",
    "making a scrapbook",
    "raising backyard chickens",
    "learning to juggle",
    "repotting a cactus",
    "cycling in the rain",
    "writing a cover letter",
    "making pancakes",
    "baking cookies with children",
    "climbing at an indoor gym",
    "sharing a flat with roommates",
    "growing herbs on a windowsill",
    "folding paper cranes",
    "caring for a hamster",
    "planning a garage sale",
    "decluttering a garage",
    "practicing public speaking",
    "cooking with lentils",
    "visiting a farmers market",
    "buying a winter coat",
    "flying a kite",
]
"""Every fourth topic (index % 4 == 3) is held out; see the module docstring."""

TRAIN_TOPICS = [t for i, t in enumerate(TOPICS) if i % 4 != 3]
HELDOUT_TOPICS = [t for i, t in enumerate(TOPICS) if i % 4 == 3]


LEXICAL = ("keyword", "forbidden_word", "start_phrase", "end_phrase", "title", "postscript")
"""Constraints a reader checks by looking at words, with no counting (a word present or absent,
how the text starts and ends, a title, a postscript). The ``constraints-lexical-*`` sets use only
these: measured on the first 100 ``builtin:constraints-pairs`` (``grm eval`` of
``checklist-data-logprob``), Qwen2.5-Coder-1.5B's checklist reading picked the following response
in 38 of the 40 pairs whose broken constraint was one of them and in 35 of the 60 others (counts of
words, sentences, paragraphs, bullets; case; commas; JSON): a GRM of this size can only teach the
lexical ones."""


def draw_constraints(
    rng: random.Random, k: int, types: tuple[str, ...] = tuple(ARGS), values: dict[str, list[Any]] | None = None
) -> list[dict[str, Any]]:
    """``k`` mutually compatible constraints of ``types`` with their arguments (from ``values``,
    default ``VALUES``), in drawing order."""
    values = {**VALUES, **(values or {})}
    chosen: list[str] = []
    types = list(types)
    while len(chosen) < k:
        options = [t for t in types if all(compatible(t, c) for c in chosen)]
        chosen.append(rng.choice(options))
    out = []
    for t in chosen:
        c: dict[str, Any] = {"type": t}
        for arg in ARGS[t]:
            c[arg] = rng.choice(values[t])
        out.append(c)
    return out


def instruction(c: dict[str, Any]) -> str:
    return INSTRUCTIONS[c["type"]].format(**c)


PASSED_BY_NO = frozenset({"forbidden_word"})
"""Constraints whose checklist question asks about presence, so "No" passes: a small judge reads
"does it use X?" far better than "does it avoid X?" (Qwen2.5-Coder-1.5B on responses SmolLM2 wrote
that broke a forbidden word: 11/14 pairs right against 8/14; benchmarks/policy_pairs.py)."""


def question(c: dict[str, Any]) -> str:
    return QUESTIONS[c["type"]].format(**c)


def checklist_item(c: dict[str, Any]) -> str | dict[str, Any]:
    """The checklist entry of constraint ``c``: its question, with ``pass_if: no`` where "No" passes."""
    return {"question": question(c), "pass_if": "no"} if c["type"] in PASSED_BY_NO else question(c)


def make_prompts(
    topics: list[str],
    n: int,
    seed: int,
    split: str,
    types: tuple[str, ...] = tuple(ARGS),
    tasks: list[str] = TASKS,
    values: dict[str, list[Any]] | None = None,
    avoid: set[str] | None = None,
    count: int | None = None,
) -> list[dict[str, Any]]:
    """``n`` rows (id, prompt, topic, constraints, checklist) over ``topics`` and ``tasks`` with
    ``count`` constraints each (None: 1-3, weighted 3:4:3) of ``types`` (arguments from ``values``,
    default ``VALUES``), deterministic by seed; no text of ``avoid`` is drawn."""
    rng = random.Random(f"constraints-{split}:{seed}")
    rows: list[dict[str, Any]] = []
    seen: set[str] = set(avoid or ())
    while len(rows) < n:
        topic = rng.choice(topics)
        task = rng.choice(tasks).format(topic=topic)
        k = count if count is not None else rng.choices([1, 2, 3], weights=[3, 4, 3])[0]
        cons = draw_constraints(rng, k, types, values)
        text = " ".join([task] + [instruction(c) for c in cons])
        if text in seen:
            continue
        seen.add(text)
        rows.append(
            {
                "id": f"constraints-{split}-{len(rows)}",
                "prompt": text,
                "topic": topic,
                "constraints": cons,
                "checklist": [checklist_item(c) for c in cons],
            }
        )
    return rows


def constraints_train(n: int = 512, seed: int = 0, lexical: bool = False) -> list[dict[str, Any]]:
    if lexical:
        return make_prompts(TRAIN_TOPICS, n, seed, "lexical-train", LEXICAL)
    return make_prompts(TRAIN_TOPICS, n, seed, "train")


def constraints_heldout(n: int = 200, seed: int = 0, lexical: bool = False) -> list[dict[str, Any]]:
    if lexical:
        return make_prompts(HELDOUT_TOPICS, n, seed, "lexical-heldout", LEXICAL)
    return make_prompts(HELDOUT_TOPICS, n, seed, "heldout")


# ---------------------------------------------------------------- the unseen held-out split

UNSEEN_TASKS = [
    "Draft a two-minute talk for a school assembly about {topic}.",
    "Write an entry for a questions-and-answers page about {topic}.",
    "Reply to a neighbor who asked how to begin {topic}.",
    "Outline a one-day workshop on {topic}.",
    "Write a postcard to a grandparent about {topic}.",
    "Tell a coworker what surprised you most about {topic}.",
]
"""Task templates no training prompt uses (``constraints-lexical-unseen``)."""

UNSEEN_VALUES: dict[str, list[Any]] = {
    "keyword": ["harmony", "lantern", "compass", "orchard", "meadow", "ribbon", "puzzle", "thunder"],
    "forbidden_word": ["totally", "super", "honestly", "simply", "truly", "extremely"],
    "end_phrase": ["Thanks for reading.", "Good luck with it.", "That is all for now."],
    "start_phrase": ["Quick answer:", "To begin:", "Here is the idea:"],
}
"""Keywords, forbidden words and phrases no training prompt uses (``constraints-lexical-unseen``);
like ``VALUES``, none occurs in a topic, a task or the sentences ``grm.data.constraint_pairs`` writes."""


def constraints_lexical_dev(n: int = 200, seed: int = 0) -> list[dict[str, Any]]:
    """The training side's own check set (``constraints-lexical-dev``): training topics, tasks and
    vocabulary, no text of the first 512 training prompts; where a judge, template or task is chosen."""
    train = {r["prompt"] for r in constraints_train(512, seed, lexical=True)}
    return make_prompts(TRAIN_TOPICS, n, seed, "lexical-dev", LEXICAL, avoid=train)


def constraints_lexical_unseen(n: int = 200, seed: int = 0) -> list[dict[str, Any]]:
    """Held-out prompts that share nothing with training but the constraint kinds
    (``constraints-lexical-unseen``): held-out topics, ``UNSEEN_TASKS`` and ``UNSEEN_VALUES``."""
    return make_prompts(HELDOUT_TOPICS, n, seed, "lexical-unseen", LEXICAL, UNSEEN_TASKS, UNSEEN_VALUES)


QUICK = ("keyword",)
"""The quickstart's constraint (``builtin:constraints-quick-*``): one per prompt, the word to
include, which an untrained SmolLM2 follows about half the time (so a group of samples differs)
and a 0.5B checklist judge reads well."""


def constraints_quick(split: str, n: int = 200, seed: int = 0) -> list[dict[str, Any]]:
    """The quickstart's prompts: one ``QUICK`` constraint each. ``train``: training topics, tasks
    and words; ``heldout``: held-out topics, ``UNSEEN_TASKS`` and ``UNSEEN_VALUES``' words, so the
    before/after check asks for words, in tasks, the policy never trained on."""
    if split == "train":
        return make_prompts(TRAIN_TOPICS, n, seed, "quick-train", QUICK, count=1)
    if split == "heldout":
        return make_prompts(HELDOUT_TOPICS, n, seed, "quick-heldout", QUICK, UNSEEN_TASKS, UNSEEN_VALUES, count=1)
    raise ValueError(f"split must be 'train' or 'heldout', got {split!r}")
