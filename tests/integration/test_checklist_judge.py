"""The shipped checklist judge on the real SmolLM2: it writes a checklist once for the prompt, reads
every response against every question as P(yes), and a data checklist is read the same way."""

import pytest

from grm.judges import Sample, build_judge, load

pytestmark = pytest.mark.slow


def test_the_shipped_checklist_judge_scores_a_group_on_smollm2(smollm2_fp32):
    judge = load("builtin:checklist-logprob", engine=smollm2_fp32)
    prompt = "What is 17 + 25? Think briefly, then end with 'The answer is N.'"
    group = [
        Sample(prompt=prompt, response="17 + 25 = 42. The answer is 42.", id="g/0"),
        Sample(prompt=prompt, response="I like turtles.", id="g/1"),
        Sample(prompt=prompt, response="17 + 25 = 32. The answer is 32.", id="g/2"),
    ]
    (results,) = judge.score_groups([group])

    assert judge.writer.generated == 1  # one checklist for the prompt's whole group
    questions = [a["question"] for a in results[0].checklist]
    assert 1 <= len(questions) <= judge.spec.checklist.max_items
    for r in results:
        assert not r.masked and r.parse_failures == 0
        assert [a["question"] for a in r.checklist] == questions
        assert all(0 < a["p_yes"] < 1 for a in r.checklist)  # a real reading, neither default nor certain
        assert 0 <= r.reward <= 1 and r.reward == pytest.approx(sum(a["p_yes"] for a in r.checklist) / len(questions))
    assert results[0].samples[0].view == -1 and results[1].samples[0].view == 0  # the writing, on the first only
    judge.score_batch(group[:1])  # a later step: the cached checklist, no writing
    assert judge.writer.generated == 1

    data = build_judge(
        judge.spec.model_copy(update={"checklist": judge.spec.checklist.model_copy(update={"source": "data", "template": None})}),
        judge.base_dir,
        smollm2_fp32,
    )
    checklist = ["Is the final answer 42?", {"question": "Does the answer end with 'The answer is N.'?", "weight": 2}]
    right, wrong = data.score_batch(
        [Sample(prompt=prompt, response=s.response, metadata={"checklist": checklist}) for s in group[::2]]
    )
    for r in (right, wrong):
        assert [a["question"] for a in r.checklist] == [checklist[0], checklist[1]["question"]]
        assert 0 <= r.score <= 1 and not r.masked
