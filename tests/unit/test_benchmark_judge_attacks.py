"""benchmarks/judge_attacks.py's kept judgments without a model: what the judge is sent decides the
key, equal requests are judged once, and a resumed run reads back every finished batch."""

from __future__ import annotations

import pytest

from grm.judges import Sample, load
from grm.judges.types import JudgeResult
from tests.unit.beside import script


@pytest.fixture(scope="module")
def ja():
    with script("benchmarks", "judge_attacks") as module:
        yield module


class Quiet:
    def add_task(self, *a, **k):
        return 0

    def update(self, *a, **k):
        pass


def samples(ja, attacks):
    items = ja.make_items(2, 0)
    return [
        Sample(prompt=it.prompt, response=ja.attacked(it, a), reference=str(it.answer), id=f"{a}/{k}")
        for a in attacks
        for k, it in enumerate(items)
    ]


def counting(judge, calls):
    """The judge with its model call replaced: each sample's reward is the length of its response."""

    def score_batch(batch):
        calls.append(len(batch))
        return [JudgeResult(judge=judge.spec.name, score=len(s.response), reward=len(s.response) / 100) for s in batch]

    judge.score_batch = score_batch
    return judge


def test_requests_decide_the_key(ja):
    attacks = ["none", "score", "grader-note", "polite"]
    off = load("builtin:pointwise-logprob", overrides=["guard.neutralise=false", "guard.fence=false"])
    on = load("builtin:pointwise-logprob", overrides=["guard.neutralise=true"])
    s = samples(ja, attacks)[::2]  # the first item under each attack
    k_off = [ja.Judgments.key(off, x) for x in s]
    k_on = [ja.Judgments.key(on, x) for x in s]
    assert len(set(k_off)) == 4  # every attack is text the judge reads
    assert k_on[0] == k_on[1] == k_on[2] != k_on[3]  # neutralised: the request equals none's; polite stays
    assert k_on[0] != k_off[0]  # the guard is part of the spec: the halves never share a judgment
    rule = load("builtin:constraints")  # nothing rendered: the sample itself is the key
    assert len({ja.Judgments.key(rule, x) for x in s}) == 4


def test_equal_requests_are_judged_once_and_a_resume_reads_them_back(ja, tmp_path):
    path = tmp_path / "out.json.judgments.jsonl"
    attacks = ["none", "score", "grader-note", "polite"]
    calls: list[int] = []
    judge = counting(load("builtin:pointwise-logprob", overrides=["guard.neutralise=true"]), calls)
    store = ja.Judgments(path, keep=False)
    got = store.score(judge, samples(ja, attacks), 3, Quiet(), "on")
    assert sum(calls) == 4 and calls == [3, 1]  # 8 samples, 4 distinct requests (none's 2, polite's 2), batches of 3
    assert len(path.read_text().splitlines()) == 4
    by_id = {s.id: r for s, r in zip(samples(ja, attacks), got, strict=True)}
    assert by_id["score/0"].score == by_id["none/0"].score  # the neutralised attack is given none's judgment

    calls.clear()
    again = ja.Judgments(path, keep=True).score(judge, samples(ja, attacks), 3, Quiet(), "on")
    assert calls == [] and [r.score for r in again] == [r.score for r in got]
    with path.open("a") as f:
        f.write('{"key": "torn')  # a kill mid-line
    assert len(ja.Judgments(path, keep=True).known) == 4
    ja.Judgments(path, keep=False)  # a fresh run does not reuse another run's judgments
    assert not path.exists()
