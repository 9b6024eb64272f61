"""The previous-anchor store (``groups.anchor: previous``): what step s reads, what is forgotten,
the checkpointed state, and the scheduler handing it to judges as chunks land."""

import json
import sys
from types import SimpleNamespace

import pytest

from grm.config import JudgeSpec
from grm.data.prompts import Prompt, PromptStream
from grm.orchestrator.anchors import AnchorStore, attach, remember, store_for
from grm.orchestrator.recorder import Recorder
from grm.orchestrator.roles import JudgeHandle
from grm.orchestrator.scheduler import Scheduler
from grm.orchestrator.types import Group, Rollout
from tests.unit.orchestrator.fakes import FakeRay, Method, Ref, fake_policy, roles
from tests.unit.orchestrator.test_scheduler import config


def answers(step, *prompt_ids, version=None):
    """One step's greedy answers: ``(prompt id, prompt text, response, policy version)``."""
    return [(p, f"text of {p}", f"{p}@{step}", step - 1 if version is None else version) for p in prompt_ids]


def seen(store, step, *prompt_ids):
    """The response each prompt's lookup for ``step`` finds (None: nothing)."""
    out = []
    for p in prompt_ids:
        a = store.lookup(step, p, f"text of {p}")
        out.append(None if a is None else a.text)
    return out


def test_sync_step_s_compares_with_the_latest_earlier_step_and_keeps_one_answer_per_prompt():
    store = AnchorStore(capacity=10, lag=1)
    assert seen(store, 1, "a") == [None]  # first epoch: nothing earlier, the judge falls back
    store.write(1, answers(1, "a", "b"))
    assert seen(store, 1, "a") == [None]  # a step never reads its own answers
    assert seen(store, 2, "a", "b", "c") == ["a@1", "b@1", None]
    store.write(2, answers(2, "a"))
    assert seen(store, 3, "a", "b") == ["a@2", "b@1"]  # b was not rolled out in step 2: its step-1 answer
    a = store.lookup(3, "a", "text of a")
    assert (a.policy_version, a.step) == (1, 2)
    assert all(len(v) == 1 for v in store.prompts.values())


def test_async_reads_skip_the_steps_that_may_not_be_trained_yet():
    # max_staleness 1: step 3's rollouts may land while step 2 trains, or after; step 1 is trained in both
    store = AnchorStore(capacity=10, lag=2)
    store.write(1, answers(1, "a"))
    before = seen(store, 3, "a")
    store.write(2, answers(2, "a"))
    assert before == seen(store, 3, "a") == ["a@1"]  # the same whichever landed first
    assert seen(store, 4, "a") == ["a@2"]
    store.write(3, answers(3, "a"))
    store.write(4, answers(4, "a"))
    assert [x.step for x in store.prompts["a"]] == [3, 4]  # what step 5 and later can still ask for
    assert seen(store, 5, "a") == ["a@3"]


def test_a_prompt_twice_in_a_step_keeps_the_later_answer_and_another_text_under_the_same_id_finds_nothing():
    store = AnchorStore(capacity=10, lag=1)
    store.write(1, [("a", "text of a", "first", 0), ("a", "text of a", "second", 0)])
    assert seen(store, 2, "a") == ["second"]
    assert store.lookup(2, "a", "another prompt reusing the id") is None


def test_the_least_recently_rolled_out_prompts_are_forgotten_and_reads_do_not_count_as_use():
    store = AnchorStore(capacity=2, lag=1)
    store.write(1, answers(1, "a", "b"))
    assert seen(store, 2, "a") == ["a@1"]  # a read, not a use
    store.write(2, answers(2, "c"))
    assert list(store.prompts) == ["b", "c"] and seen(store, 3, "a") == [None]
    store.write(3, answers(3, "b"))
    store.write(4, answers(4, "d"))
    assert list(store.prompts) == ["b", "d"]


def steps_of_a_run(store, steps, log, checkpoint_at=None):
    """A run over 3 prompts, 2 per step (each step re-sees earlier ones), logging what every lookup
    found; at ``checkpoint_at`` the store goes through JSON into a new one, as a resume does."""
    ids = ["a", "b", "c"]
    for s in steps:
        if s == checkpoint_at:
            saved = json.loads(json.dumps(store.state()))
            store = AnchorStore(store.capacity, store.lag)
            store.restore(saved)
        chosen = [ids[(2 * (s - 1)) % 3], ids[(2 * (s - 1) + 1) % 3]]
        log.append((s, seen(store, s, *ids)))
        store.write(s, answers(s, *chosen))
    return store


@pytest.mark.parametrize("lag", [1, 2])
def test_a_resumed_store_gives_the_anchors_of_an_uninterrupted_run(lag):
    straight, resumed = [], []
    a = steps_of_a_run(AnchorStore(capacity=2, lag=lag), range(1, 8), straight)
    b = steps_of_a_run(AnchorStore(capacity=2, lag=lag), range(1, 8), resumed, checkpoint_at=4)
    assert straight == resumed and a.state() == b.state()
    assert all(len(entries) <= lag for entries in a.prompts.values())  # bounded per prompt too
    assert any(x is not None for _, found in straight for x in found)  # it did compare with something


def test_a_state_of_another_version_is_refused_and_a_smaller_capacity_forgets_at_once():
    store = AnchorStore(capacity=3, lag=1)
    store.write(1, answers(1, "a", "b", "c"))
    small = AnchorStore(capacity=2, lag=1)
    small.restore(store.state())
    assert list(small.prompts) == ["b", "c"]
    with pytest.raises(ValueError, match="state version"):
        small.restore({"version": 99, "prompts": []})


def pairwise(**groups):
    return JudgeSpec(
        name="pair", mode="pairwise", model="m", template="builtin:pairwise-preference", parser={"type": "verdict"}, groups=groups
    )


def test_a_store_exists_only_for_previous_anchors_and_lags_by_the_staleness():
    assert store_for(config(), [pairwise(strategy="anchor", anchor="greedy")]) is None
    sync = store_for(
        config(), [pairwise(strategy="anchor", anchor="previous", remember=5), pairwise(strategy="anchor", anchor="previous")]
    )
    assert (sync.capacity, sync.lag) == (10_000, 1)
    run_async = store_for(
        config(schedule={"mode": "async", "max_staleness": 2}), [pairwise(strategy="anchor", anchor="previous")]
    )
    assert run_async.lag == 3


def greedy_policy():
    """The fake policy, each group with a greedy answer naming its prompt and step (seed)."""
    base = fake_policy()

    def rollout(prompts, keys, n, seed):
        groups, secs = base.rollout.fn(prompts, keys, n, seed).value
        for g, p in zip(groups, prompts, strict=True):
            g.anchor = f"greedy {p.id} seed {seed}"
            for r in g.rollouts:
                r.version = seed
        return Ref((groups, secs))

    return SimpleNamespace(rollout=Method(rollout), prepare=base.prepare)


class Seen:
    """A local judge recording the anchors its samples carried."""

    def __init__(self) -> None:
        self.seen: list = []

    def score_groups(self, groups):
        self.seen += [g[0] for g in groups]
        return [[None for _ in g] for g in groups]


def test_the_scheduler_gives_landed_groups_the_previous_steps_greedy_answers():
    cfg = config(algorithm={"prompts_per_step": 2})
    judge = Seen()
    store = AnchorStore(capacity=10, lag=1)
    stream = PromptStream([Prompt(id=f"p{i}", text=f"question {i}", reference=None) for i in range(2)], seed=0, shuffle=False)
    sched = Scheduler(
        cfg, roles([JudgeHandle("pair", 1.0, True, local=judge)], greedy_policy()), stream, FakeRay(), anchors=store
    )
    first = sched.collect(sched.take(0))
    remember(store, 1, first)
    sched.trained()
    second = sched.collect(sched.take(1))
    assert [s.previous_anchor for s in judge.seen[:2]] == [None, None]  # step 1: nothing earlier
    step1 = [g.anchor for g in first]
    assert [s.previous_anchor.text for s in judge.seen[2:]] == step1  # the same prompts' step-1 answers
    assert [s.previous_anchor.step for s in judge.seen[2:]] == [1, 1]
    assert judge.seen[2].previous_anchor.policy_version == first[0].rollouts[0].version
    assert [g.previous["text"] for g in second] == step1  # what samples.jsonl records
    assert judge.seen[2].anchor.text == second[0].anchor != step1[0]  # the current greedy answer stays beside it
    assert judge.seen[2].group == second[0].key and "anchor" not in judge.seen[2].metadata  # typed fields, not metadata keys


def test_attach_and_remember_key_groups_by_their_prompt():
    p = Prompt(id="q", text="what?", reference=None)
    g = Group("s0r0g0", [Rollout("s0r0g0/0", p, "s0r0g0", [1], [2], "r", [-0.1], "stop", version=3)], anchor="greedy")
    no_greedy = Group("s0r0g1", [Rollout("s0r0g1/0", p, "s0r0g1", [1], [2], "r", [-0.1], "stop", version=3)])
    store = AnchorStore(capacity=4, lag=1)
    remember(store, 1, [g, no_greedy])
    attach(store, 2, [g])
    assert g.previous == {"text": "greedy", "policy_version": 3, "step": 1}
    s = g.samples()[0]
    assert s.previous_anchor is not None and s.previous_anchor.info() == {"source": "previous", "policy_version": 3, "step": 1}
    assert s.previous_anchor.text == g.previous["text"] and s.anchor is not None and s.anchor.policy_version == 3


def test_a_checkpoint_carries_the_store_and_a_resume_hands_it_back(tmp_path, monkeypatch):
    fake_ray = SimpleNamespace(get=lambda ref: ref, exceptions=SimpleNamespace(RayTaskError=RuntimeError))
    monkeypatch.setitem(sys.modules, "ray", fake_ray)
    policy = SimpleNamespace(
        save=Method(lambda path, token=None: []),  # every rank saw the directory: nothing shipped
        sees=Method(lambda path, token: True),
        load=Method(lambda path, shipped=None, token=None: None),
    )
    stream = PromptStream([Prompt(id="a", text="text of a", reference=None)], seed=0, shuffle=False)
    rec = Recorder(tmp_path)
    store = AnchorStore(capacity=4, lag=1)
    store.write(1, answers(1, "a"))
    rec.checkpoint(1, policy, stream, 0, keep=2)  # a run without previous anchors writes no store
    assert not (tmp_path / "checkpoints" / "step-1" / "anchors.json").exists()
    rec.checkpoint(2, policy, stream, 0, keep=2, anchors=store.state())
    state = rec.resume_state(policy)
    step2 = str(tmp_path / "checkpoints" / "step-2")
    assert state["step"] == 2 and [c[:2] for c in policy.load.calls] == [(step2, None)]
    assert not [p for p in (tmp_path / "checkpoints" / "step-2").iterdir() if p.name.startswith(".driver-sees-")]
    again = AnchorStore(capacity=4, lag=1)
    again.restore(state["anchors"])
    assert seen(again, 3, "a") == ["a@1"] and again.state() == store.state()
