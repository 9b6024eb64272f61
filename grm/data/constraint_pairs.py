"""``builtin:constraints-pairs``: labelled pairs over the held-out constraint prompts.

For each held-out prompt, a response that follows every constraint and one that breaks exactly
one of them (which one rotates over the prompt's constraints), both written from templated
sentences about the prompt's topic; the label (the following side) alternates 1, 2, 1, 2. Lengths
are steered so neither side is systematically longer: for a broken ``max_words`` the failing
response must be the longer, for a broken ``min_words`` the shorter; otherwise the longer side
alternates every two pairs, independently of the label. ``length_stats`` reports the fraction where
the passing response is longer (about half by default).

Responses are built to pass or fail by construction; the rule checkers
(``grm.judges.instructions``) verify every pair in ``tests/unit/data/test_constraint_pairs.py``.
"""

from __future__ import annotations

import json
import random
from typing import Any

from grm.data.constraints import constraints_heldout, constraints_lexical_dev, constraints_quick, constraints_train

SENTENCES = [
    "{Topic} gets easier with a little planning",
    "Start small when it comes to {topic}",
    "Make a short list before you begin",
    "Ask a friend for help if you feel stuck",
    "Set aside some time each week for {topic}",
    "Write down what worked and what did not",
    "Keep each step clear and easy to follow",
    "A calm plan beats a rushed one",
    "Check your progress after a few days",
    "Small changes add up over time",
    "Pick one goal and stick with it",
    "Most people enjoy {topic} more than they expect",
    "Good tools help but they are not required",
    "Try to learn from each attempt",
    "It is fine to make mistakes at first",
    "Share what you learn with someone else",
    "Rest when you need to and come back later",
    "Simple habits make {topic} feel natural",
    "Look for free guides at your local library",
    "Be kind to yourself while you learn",
    "Plan ahead so nothing catches you off guard",
    "Keep the first attempt short",
    "Notice what you enjoy most",
    "Go slowly",
    "Stay flexible",
    "Enjoy the process",
]
"""Body sentences (no final stop): no commas, no keyword or forbidden word of ``VALUES``."""

CLAUSES = [
    "that saves time later",
    "you will feel more confident",
    "the results will follow",
    "the effort pays off",
    "you can adjust as you go",
    "it gets more fun each time",
]
"""Joined to a sentence with "and" to lengthen it when the sentence count is fixed."""

KEYWORD_SENTENCE = "One word to keep in mind is {word}"
FORBIDDEN_SENTENCE = "People often say {word} when they talk about {topic}"
TITLE = "<<A short guide to {topic}>>"
POSTSCRIPT = "P.S. Have fun with {topic}."


def words(text: str) -> int:
    """Words as ``grm.judges.instructions.words`` counts them (tokens with a letter or digit)."""
    return sum(1 for w in text.split() if any(ch.isalnum() for ch in w))


class _Draft:
    """One response under construction: units (bullets or paragraphs) of sentences of clauses."""

    def __init__(self, row: dict[str, Any], broken: str | None, rng: random.Random) -> None:
        self.cons = {c["type"]: c for c in row["constraints"]}
        self.topic = row["topic"]
        self.broken = broken
        self.rng = rng
        self.pool = [s.format(topic=self.topic, Topic=self.topic[0].upper() + self.topic[1:]) for s in SENTENCES]
        rng.shuffle(self.pool)
        self.marker = rng.choice(["*", "-"])
        self.fence = rng.random() < 0.5
        self.wrong_json = rng.random() < 0.5
        self.fixed = "max_sentences" in self.cons
        n_units = 1 if self.fixed else rng.choice([1, 2])
        for kind in ("bullets", "paragraphs"):
            if kind in self.cons:
                n = self.cons[kind]["n"]
                n_units = n + (rng.choice([-1, 1]) if broken == kind and n > 1 else int(broken == kind))
        self.units: list[list[list[str]]] = [[[self._sentence()]] for _ in range(n_units)]
        if self.fixed:
            n = self.cons["max_sentences"]["n"] + (rng.choice([1, 2]) if broken == "max_sentences" else 0)
            n -= int(self._has("end_phrase"))  # the end phrase is a sentence of its own
            while sum(len(u) for u in self.units) < n:
                self.units[0].append([self._sentence()])
        specials = []
        if self._has("keyword"):
            specials.append(KEYWORD_SENTENCE.format(word=self.cons["keyword"]["word"]))
        if broken == "forbidden_word":
            specials.append(FORBIDDEN_SENTENCE.format(word=self.cons["forbidden_word"]["word"], topic=self.topic))
        for k, s in enumerate(specials):  # replace, so a fixed sentence count stays
            unit = self.units[k % len(self.units)]
            unit[-1] = [s]

    def _has(self, kind: str) -> bool:
        """Is ``kind`` a constraint this response must follow?"""
        return kind in self.cons and self.broken != kind

    def _sentence(self) -> str:
        if not self.pool:
            self.pool = [s.format(topic=self.topic, Topic=self.topic[0].upper() + self.topic[1:]) for s in SENTENCES]
            self.rng.shuffle(self.pool)
        return self.pool.pop()

    def grow(self) -> None:
        """Add one piece to the shortest unit: a sentence, or a clause when sentences are counted."""
        unit = min(self.units, key=lambda u: sum(words(" ".join(s)) for s in u))
        if self.fixed:
            min(unit, key=len).append(self.rng.choice(CLAUSES))
        else:
            unit.append([self._sentence()])

    def render(self) -> str:
        texts = [" ".join(" and ".join(s) + "." for s in unit) for unit in self.units]
        if self.broken == "no_commas":
            texts[0] = texts[0].replace(".", ", of course.", 1)
        if "json_key" in self.cons:
            key = self.cons["json_key"]["key"]
            if self.broken == "json_key":
                if self.wrong_json:
                    return self._case(json.dumps({"text": " ".join(texts)}, ensure_ascii=False))
                return self._case(" ".join(texts))
            body = json.dumps({key: " ".join(texts)}, ensure_ascii=False)
            return self._case(f"```json\n{body}\n```" if self.fence else body)
        if "bullets" in self.cons:
            body = "\n".join(f"{self.marker} {t}" for t in texts)
            sep = "\n"
        else:
            body = "\n\n".join(texts)
            sep = " "
        if self._has("start_phrase"):
            body = self.cons["start_phrase"]["phrase"] + sep + body
        if self._has("title"):
            body = TITLE.format(topic=self.topic) + "\n\n" + body
        if self._has("end_phrase"):
            body = body + sep + self.cons["end_phrase"]["phrase"]
        if self._has("postscript"):
            body = body + "\n\n" + POSTSCRIPT.format(topic=self.topic)
        return self._case(body)

    def _case(self, text: str) -> str:
        return text.lower() if self._has("lowercase") else text


def _bounds(cons: dict[str, dict[str, Any]], broken: str | None) -> tuple[int, int]:
    lo, hi = 1, 10**6
    if "max_words" in cons:
        n = cons["max_words"]["n"]
        lo, hi = (max(lo, n + 1), hi) if broken == "max_words" else (lo, min(hi, n))
    if "min_words" in cons:
        n = cons["min_words"]["n"]
        lo, hi = (lo, min(hi, n - 1)) if broken == "min_words" else (max(lo, n), hi)
    return lo, hi


def compose(row: dict[str, Any], broken: str | None, target: int, rng: random.Random) -> str | None:
    """A response to ``row`` following all its constraints but ``broken`` (None: all), of about
    ``target`` words; None when the word bounds cannot be met with this draw."""
    draft = _Draft(row, broken, rng)
    lo, hi = _bounds(draft.cons, broken)
    text = draft.render()
    for _ in range(200):
        if words(text) >= target:
            break
        saved = [[list(s) for s in u] for u in draft.units]
        draft.grow()
        longer = draft.render()
        if words(longer) > hi:
            draft.units = saved
            break
        text = longer
    return text if lo <= words(text) <= hi else None


def _targets(cons: dict[str, dict[str, Any]], broken: str, longer_pass: bool, rng: random.Random) -> tuple[int, int]:
    """(pass, fail) word targets."""
    if broken == "max_words":
        n = cons["max_words"]["n"]
        return n - rng.randint(1, 8), n + rng.randint(2, 10)
    if broken == "min_words":
        n = cons["min_words"]["n"]
        return n + rng.randint(2, 10), n - rng.randint(2, 10)
    lo, hi = _bounds(cons, None)
    base = rng.randint(max(lo, 20), min(hi, 70)) if max(lo, 20) <= min(hi, 70) else lo
    gap = rng.randint(3, 10)
    short, long = base, base + gap
    if long > hi:
        short, long = hi - gap, hi
    return (long, short) if longer_pass else (short, long)


def constraints_pairs(n: int = 200, seed: int = 0, lexical: bool = False, split: str = "heldout") -> list[dict[str, Any]]:
    """One labelled pair per held-out prompt (``constraints_heldout(n, seed, lexical)``) that can be
    built; ``split="train"``: per training prompt (``constraints_train``: other topics), the pairs a
    judge is trained on (``constraints-pairs-train``), never the held-out ones it is evaluated on;
    ``split="quick"``: per quickstart training prompt (``constraints_quick("train")``), the pairs the
    quickstart's judge is chosen and gated on."""
    sources = {
        "heldout": lambda: constraints_heldout(n, seed, lexical),
        "train": lambda: constraints_train(n, seed, lexical),
        "dev": lambda: constraints_lexical_dev(n, seed),
        "quick": lambda: constraints_quick("train", n, seed),
    }
    if split not in sources or (split in ("dev", "quick") and not lexical):
        raise ValueError(f"split must be 'heldout', 'train' or (lexical) 'dev' or 'quick', got {split!r}")
    train = split != "heldout"
    lex = "lexical-" if lexical else ""
    tag = f"-{split}" if train else ""
    rng = random.Random(f"constraints-{lex}pairs{tag}:{seed}")
    rows = []
    source = sources[split]()
    for i, prompt in enumerate(source):
        cons = {c["type"]: c for c in prompt["constraints"]}
        order = list(cons)
        pair = None
        for k in range(len(order)):
            broken = order[(i + k) % len(order)]
            for _ in range(20):
                want_pass, want_fail = _targets(cons, broken, (len(rows) // 2) % 2 == 0, rng)
                good, bad = compose(prompt, None, want_pass, rng), compose(prompt, broken, want_fail, rng)
                if good is not None and bad is not None and good != bad:
                    pair = good, bad, broken
                    break
            if pair:
                break
        if pair is None:
            continue
        good, bad, broken = pair
        label = 1 if len(rows) % 2 == 0 else 2
        out1, out2 = (good, bad) if label == 1 else (bad, good)
        rows.append(
            {
                "id": f"constraints-{lex}pair{tag}-{len(rows)}",
                "input": prompt["prompt"],
                "output_1": out1,
                "output_2": out2,
                "label": label,
                "broken": broken,
                "checklist": prompt["checklist"],
                "constraints": prompt["constraints"],
            }
        )
    return rows


def length_stats(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Fraction of pairs whose following response is longer (characters, as ``grm eval`` counts)."""
    longer = [len(r[f"output_{r['label']}"]) > len(r[f"output_{3 - r['label']}"]) for r in rows]
    return {"pairs": float(len(rows)), "pass_longer": sum(longer) / len(rows) if rows else float("nan")}
