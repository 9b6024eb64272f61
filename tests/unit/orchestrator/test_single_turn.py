"""Single-turn generation on the policy's engine (``grm.orchestrator.single_turn``), with an engine
stand-in that records its requests: what a rollout sends and what its rollouts keep."""

from grm.config.policy import PolicySpec
from grm.data.prompts import Prompt
from grm.engines.base import Generation
from grm.orchestrator.single_turn import greedy_answers, requests, sample_groups
from tests.unit.orchestrator.test_scheduler import config


class Engine:
    """Answers request i, sample j with tokens [i, j]; a sync cut sample 1 of every request."""

    def __init__(self) -> None:
        self.calls = []

    def encode(self, request):
        return [len(m["content"]) for m in request.messages]

    def generate(self, reqs, sp):
        self.calls.append((reqs, sp))
        return [
            Generation(
                text=f"{i}:{j}" if sp.temperature > 0 else f"greedy {i}",
                token_ids=[i, j],
                logprobs=[-0.5, -0.25],
                finish_reason="stop",
                version=3,
                request_index=i,
                sample_index=j,
                token_versions=[3, 4] if j == 1 else None,
            )
            for i in range(len(reqs))
            for j in range(sp.n)
        ]


POLICY = PolicySpec(name="p", model="smollm2-135m-instruct", system_prompt="Be brief.", generation={"stop": ["\n\n"]})
PROMPTS = [
    Prompt(id="a", text="two plus two", reference="4"),
    Prompt(id="b", text="hi", reference=None, messages=[{"role": "user", "content": "hello"}]),
]


def test_each_prompt_is_asked_under_the_system_prompt_or_as_its_own_chat():
    a, b = requests(PROMPTS, POLICY)
    assert a.messages == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "two plus two"}]
    assert b.messages == [{"role": "user", "content": "hello"}]


def test_groups_keep_each_response_under_its_prompt_with_its_ids_versions_and_log_probs():
    cfg = config(rollout={"max_new_tokens": 7, "temperature": 0.9, "greedy_anchor": True})
    eng = Engine()
    groups = sample_groups(eng, cfg, POLICY, PROMPTS, ["s0r0g0", "s0r0g1"], 2, 11, lambda: False)
    assert [g.key for g in groups] == ["s0r0g0", "s0r0g1"]
    g1 = groups[1]
    assert [r.id for r in g1.rollouts] == ["s0r0g1/0", "s0r0g1/1"] and [r.text for r in g1.rollouts] == ["1:0", "1:1"]
    assert g1.rollouts[0].prompt.id == "b" and g1.rollouts[0].prompt_ids == [5] and g1.rollouts[0].token_ids == [1, 0]
    assert [r.token_versions for r in g1.rollouts] == [None, [3, 4]] and g1.rollouts[1].version == 3
    assert g1.rollouts[1].sampled_versions() == [3, 4] and g1.rollouts[0].sampled_versions() == [3, 3]
    assert [g.anchor for g in groups] == ["greedy 0", "greedy 1"]  # greedy_anchor: one greedy answer each
    sp = eng.calls[0][1]
    assert (sp.n, sp.temperature, sp.max_new_tokens, sp.stop, sp.seed) == (2, 0.9, 7, ("\n\n",), 11)
    assert eng.calls[1][1].temperature == 0.0 and eng.calls[1][1].n == 1


def test_greedy_answers_come_back_in_prompt_order():
    eng = Engine()
    assert greedy_answers(eng, POLICY, PROMPTS, 5, lambda: False) == ["greedy 0", "greedy 1"]
    sp = eng.calls[0][1]
    assert (sp.temperature, sp.max_new_tokens, sp.n) == (0.0, 5, 1)
