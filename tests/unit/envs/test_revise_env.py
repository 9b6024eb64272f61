"""The shipped ``revise`` environment: the user asks for a rewrite with a given word after the first
answer, success is that word in the rewrite (whole word, any case), the episode ends with the
rewrite, the splits share no topic, task template, word or follow-up phrasing, and an episode
through the runner with real tokenizers trains exactly the policy's own tokens."""

import asyncio

import pytest

from grm.config.env import EnvSpec
from grm.data import constraints
from grm.data.revise_tasks import FOLLOWUPS, UNSEEN_FOLLOWUPS, _tasks
from grm.data.sources import load_rows
from grm.engines.base import SamplingParams
from grm.envs.base import EnvError, load_env, reset_env
from grm.envs.episodes import run_episodes
from grm.envs.revise import SPLITS, SYSTEM_PROMPT, ReviseEnv, split_of, task, task_rows
from grm.envs.tasks import task_rows as env_task_rows
from tests.unit.envs.test_clarify_env import run
from tests.unit.envs.test_episodes import SMOL, TokenEngine, check_exact, tokenizer

HELD = SPLITS["held_out"].start


def test_the_user_asks_for_the_word_after_the_first_answer_and_success_is_the_word_in_the_rewrite():
    t = task(HELD)
    traj = run(ReviseEnv(), {"seed": HELD}, ["A first draft.", f"A new draft with a {t.word.upper()} in it."])
    assert traj.task.messages == [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": t.request}]
    assert [x.role for x in traj.turns] == ["assistant", "user", "assistant"]  # no closing line after the rewrite
    assert traj.turns[1].content == t.followup and f'"{t.word}"' in t.followup
    assert traj.end_reason == "done" and traj.signals == {"success": 1.0, "turns": 2.0}
    assert traj.final_answer == f"A new draft with a {t.word.upper()} in it."


@pytest.mark.parametrize(
    "rewrite, success",
    [("plain text", 0.0), ("{w}s are nice", 0.0), ("sub{w}", 0.0), ("({w})", 1.0), ("{W}!", 1.0), ("a {w}", 1.0)],
)
def test_success_is_the_word_as_a_whole_word_in_the_rewrite_only(rewrite, success):
    w = task(3).word
    first_has_it = f"I already said {w}."  # the first answer never counts
    traj = run(ReviseEnv(), {"seed": 3}, [first_has_it, rewrite.format(w=w, W=w.upper())])
    assert traj.signals["success"] == success


def test_train_and_held_out_share_nothing_but_the_kind_of_request():
    train, held = _tasks("train"), _tasks("held_out")
    assert len(SPLITS["train"]) == len(train) == len(set(train)) and len(SPLITS["held_out"]) == len(held) == len(set(held))
    for k in range(4):  # topic, task template, word, follow-up phrasing: disjoint pools
        assert not {x[k] for x in train} & {x[k] for x in held}
    assert {x[2] for x in train} == set(constraints.VALUES["keyword"])
    assert {x[2] for x in held} == set(constraints.UNSEEN_VALUES["keyword"])
    assert {x[3] for x in train} == set(FOLLOWUPS) and {x[3] for x in held} == set(UNSEEN_FOLLOWUPS)
    firsts = {task(s).request for s in range(0, len(SPLITS["train"]), 97)}
    assert not firsts & {task(s).request for s in SPLITS["held_out"]}


def test_the_builtin_prompt_sets_name_the_seed_and_one_prompt_per_task():
    train, held = load_rows("builtin:revise-train"), load_rows("builtin:revise-heldout")
    assert len(train) == 2000 and len(held) == 500
    assert {r["split"] for r in train} == {"train"} and {r["split"] for r in held} == {"held_out"}
    assert len({r["prompt"] for r in held}) == len(held)  # groups are keyed by prompt: one per task
    first = held[0]
    t = task(first["seed"])
    assert first["id"] == f"revise-{HELD}" and t.request in first["prompt"] and t.followup in first["prompt"]
    assert asyncio.run(reset_env(ReviseEnv(), first)).messages[-1]["content"] == t.request


def test_rows_carry_their_split_and_a_wrong_split_or_seed_is_refused():
    assert task_rows("held_out", 2, start=1) == [{"seed": s, "split": "held_out"} for s in (HELD + 1, HELD + 2)]
    assert env_task_rows(ReviseEnv, "revise", "heldout", 3) == [{"seed": HELD + k, "split": "held_out"} for k in range(3)]
    assert split_of(5) == "train" and split_of(HELD - 1) is None
    with pytest.raises(EnvError, match=r"ReviseEnv.reset raised ValueError: seed 5 is not in split 'held_out'"):
        asyncio.run(reset_env(ReviseEnv(), {"seed": 5, "split": "held_out"}))
    with pytest.raises(EnvError, match=f"seed {HELD - 1} is in no split"):
        asyncio.run(reset_env(ReviseEnv(), {"seed": HELD - 1}))
    with pytest.raises(EnvError, match="integer 'seed'"):
        asyncio.run(reset_env(ReviseEnv(), {"seed": True}))


def test_revise_loads_by_name_and_checks_its_argument():
    assert EnvSpec(type="revise").target == "grm.envs.revise:ReviseEnv"
    env = load_env("revise", {"system_prompt": ""})
    assert [m["role"] for m in asyncio.run(reset_env(env, {"seed": 0})).messages] == ["user"]
    with pytest.raises(EnvError, match=r"ReviseEnv\(\*\*\{'system_prompt': 3\}\) raised ValueError: system_prompt"):
        load_env("revise", {"system_prompt": 3})


def test_an_episode_through_the_runner_trains_exactly_the_policy_tokens():
    tok = tokenizer(SMOL)
    rows = [{"seed": 0}, {"seed": 1}]
    words = [task(0).word, task(1).word]
    policy = [lambda k, key: ["Here is a draft.", f"Now with {words[key]}."][min(k, 1)], lambda k, key: "Same draft."]
    engine = TokenEngine(tok, lambda key, k: policy[key](k, key))
    kept, ignored = run_episodes(engine, tok, ReviseEnv, rows, SamplingParams(max_new_tokens=32), seeds=[0, 1])
    assert kept.end_reason == ignored.end_reason == "done"
    assert kept.signals == {"success": 1.0, "turns": 2.0} and ignored.signals == {"success": 0.0, "turns": 2.0}
    assert [t.role for t in kept.turns] == ["assistant", "user", "assistant"]
    assert task(0).followup in tok.decode(engine.sent[0][1])  # the rewrite was generated after the request
    check_exact(kept, engine, 0, tok)
