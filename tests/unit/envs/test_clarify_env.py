"""The shipped ``clarify`` environment: a scripted policy that asks then answers succeeds, one that
answers at once fails unless it guesses the hidden value (which rarely works by construction), the
user gives the hidden detail only after a question, the splits are disjoint, and an episode through
the runner with real tokenizers ends ``done`` with success."""

import asyncio
from collections import Counter

import pytest

from grm.config.env import EnvSpec
from grm.data.sources import load_rows
from grm.data.trajectory import Task, Trajectory, Turn
from grm.engines.base import SamplingParams
from grm.envs.base import AssistantMessage, EnvError, Environment, env_factory, load_env, reset_env, step_env
from grm.envs.clarify import (
    CLOSING,
    FAMILIES,
    NUDGE,
    SPLITS,
    ClarifyEnv,
    answer_number,
    extract_answer,
    is_question,
    split_of,
    task,
    task_rows,
)
from grm.envs.episodes import run_episodes
from tests.unit.envs.test_episodes import SMOL, TokenEngine, check_exact, tokenizer

ASK = "Before I can work that out, could you tell me the missing detail?"


def run(env: Environment, row: dict, policy: list[str]) -> Trajectory:
    """A minimal episode loop over the protocol helpers (no tokens, no runner limits)."""

    async def go() -> Trajectory:
        reset = await reset_env(env, row)
        traj = Trajectory("t", Task(row, reset.messages, reset.tools))
        for text in policy:
            traj.turns.append(Turn("assistant", text))
            step = await step_env(env, AssistantMessage(text))
            traj.turns += [Turn(o.role, o.content) for o in step.observations]
            traj.signals.update(step.signals)
            if step.done:
                traj.end_reason, traj.final_answer = "done", step.final_answer
                break
        return traj

    return asyncio.run(go())


def boxed(x: float) -> str:
    return f"That comes to \\boxed{{{x:.2f}}}."


@pytest.mark.parametrize("seed", [*range(len(FAMILIES)), *range(SPLITS["held_out"].start, SPLITS["held_out"].start + 6)])
def test_asking_then_answering_succeeds_in_every_family(seed):
    t = task(seed)
    traj = run(ClarifyEnv(), {"seed": seed}, [ASK, boxed(t.answer)])
    assert traj.task.messages[-1] == {"role": "user", "content": t.request} and t.detail not in t.request
    final = boxed(t.answer)
    expected = [("assistant", ASK), ("user", t.detail), ("assistant", final), ("user", CLOSING)]
    assert [(x.role, x.content) for x in traj.turns] == expected
    assert traj.end_reason == "done" and traj.final_answer == f"{t.answer:.2f}"
    assert traj.signals == {"success": 1.0, "asked_clarifying_question": 1.0, "turns": 2.0}


def test_the_first_tasks_read_as_expected():
    t = task(0)  # 2 candles at $11.50
    assert t.family == "order_total" and "$11.50 each" in t.request and t.detail == "I need 2 candles." and t.answer == 23.0
    t = task(1)
    assert t.detail == "My son is 4 feet 0 inches tall." and t.answer == pytest.approx(121.92)
    assert {task(s).family for s in range(6)} == {f.name for f in FAMILIES}


@pytest.mark.parametrize("seed", range(len(FAMILIES)))
def test_answering_at_once_fails_unless_it_guesses_the_hidden_value(seed):
    t = task(seed)
    wrong = run(ClarifyEnv(), {"seed": seed}, [boxed(t.answer + 10 * t.tolerance + 1)])
    assert wrong.end_reason == "done" and [x.content for x in wrong.turns[1:]] == [CLOSING]
    assert wrong.signals == {"success": 0.0, "asked_clarifying_question": 0.0, "turns": 1.0}
    lucky = run(ClarifyEnv(), {"seed": seed}, [f"Answer: {t.answer}"])
    assert lucky.signals == {"success": 1.0, "asked_clarifying_question": 0.0, "turns": 1.0}


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_a_guess_can_match_at_most_one_hidden_value_in_thirty(family):
    assert family.hidden >= 30
    for v in (0, family.size // 2, family.size - 1):
        options = family.options(v)
        answers = sorted(family.answer(*options, h) for h in range(family.hidden))
        assert min(b - a for a, b in zip(answers, answers[1:], strict=False)) > 2 * family.tolerance
        details = {family.detail(*options, h) for h in range(family.hidden)}
        assert len(details) == family.hidden  # the user's reply names the hidden value


def test_the_user_gives_the_hidden_detail_only_after_a_question():
    t = task(4)  # tip: the bill is hidden
    policy = ["Sure, I can help with that.", "Please tell me the bill amount.", ASK, boxed(t.answer)]
    traj = run(ClarifyEnv(), {"seed": 4}, policy)
    replies = [x.content for x in traj.turns if x.role == "user"]
    assert replies == [NUDGE, t.detail, "As I said: " + t.detail, CLOSING]
    assert t.detail not in NUDGE and "$" not in NUDGE
    assert traj.signals == {"success": 1.0, "asked_clarifying_question": 1.0, "turns": 4.0}


def test_question_and_answer_forms():
    keywords = FAMILIES[1].keywords  # height
    assert is_question("How tall are you?", keywords) and is_question("**Which unit?**", keywords)
    assert is_question("Please let me know your height in feet and inches.", keywords)
    assert not is_question("Your height will be converted.", keywords) and not is_question("I can help.", keywords)
    assert extract_answer("first \\boxed{3} then \\boxed{ 170.2\\text{ cm} }") == "170.2\\text{ cm}"
    assert extract_answer("Final answer: $1,234.50 in total") == "$1,234.50 in total"
    assert extract_answer("Should the answer be in cm? Is 3 the answer 4 you?") is None
    assert [answer_number(s) for s in ("$1,234.50", "170.2\\text{ cm}", "-3", ".5", "none")] == [1234.5, 170.2, -3.0, 0.5, None]


def test_a_final_answer_ends_the_episode_even_when_phrased_as_a_question():
    t = task(2)
    traj = run(ClarifyEnv(), {"seed": 2}, [f"Is it \\boxed{{{t.answer}}}?"])
    assert traj.end_reason == "done" and traj.signals["success"] == 1.0 and traj.signals["asked_clarifying_question"] == 0.0


def test_the_episode_ends_at_max_turns_without_success():
    traj = run(ClarifyEnv(max_turns=2), {"seed": 0}, ["Hmm.", ASK, "never reached"])
    assert [x.content for x in traj.turns if x.role == "user"] == [NUDGE, task(0).detail]
    assert traj.signals == {"success": 0.0, "asked_clarifying_question": 1.0, "turns": 2.0, "hit_max_turns": 1.0}


def test_train_and_held_out_tasks_are_disjoint_down_to_the_first_message():
    train = [task(s) for s in SPLITS["train"]]
    held = [task(s) for s in SPLITS["held_out"]]
    for split in (train, held):
        assert len({(t.request, t.detail) for t in split}) == len(split)  # two seeds never give one task
    assert not {t.request for t in train} & {t.request for t in held}
    assert len(train) >= 7000 and len(held) >= 800
    assert Counter(t.family for t in held) == {f.name: len(held) // len(FAMILIES) for f in FAMILIES}


def test_the_builtin_prompt_sets_name_the_seed_and_never_the_hidden_detail():
    train, held = load_rows("builtin:clarify-train"), load_rows("builtin:clarify-heldout")
    assert len(train) == 2000 and len(held) == 500
    first = held[0]
    start = SPLITS["held_out"].start
    assert first == {"id": f"clarify-{start}", "prompt": task(start).request, "seed": start, "split": "held_out"}
    assert all(r["prompt"] == task(r["seed"]).request and task(r["seed"]).detail not in r["prompt"] for r in held)
    assert not {r["prompt"] for r in train} & {r["prompt"] for r in held}
    env = ClarifyEnv()
    assert asyncio.run(reset_env(env, first)).messages[-1]["content"] == first["prompt"]  # a row starts its episode


def test_rows_carry_their_split_and_a_wrong_split_or_seed_is_refused():
    start = SPLITS["held_out"].start
    assert task_rows("held_out", 2, start=1) == [{"seed": s, "split": "held_out"} for s in (start + 1, start + 2)]
    assert split_of(5) == "train" and split_of(start - 1) is None
    env = ClarifyEnv()
    with pytest.raises(EnvError, match=r"ClarifyEnv.reset raised ValueError: seed 5 is not in split 'held_out'"):
        asyncio.run(reset_env(env, {"seed": 5, "split": "held_out"}))
    with pytest.raises(EnvError, match=f"seed {start - 1} is in no split"):
        asyncio.run(reset_env(env, {"seed": start - 1}))
    with pytest.raises(EnvError, match="integer 'seed'"):
        asyncio.run(reset_env(env, {"seed": "3"}))
    with pytest.raises(ValueError, match=f"has {len(SPLITS['held_out'])} tasks"):
        task_rows("held_out", 2, start=len(SPLITS["held_out"]) - 1)


def test_clarify_loads_by_name_and_the_hint_is_optional():
    assert EnvSpec(type="clarify").target == "grm.envs.clarify:ClarifyEnv"
    env = load_env("clarify", {"max_turns": 3, "hint": False})
    assert isinstance(env, ClarifyEnv) and env.max_turns == 3
    system = asyncio.run(reset_env(env, {"seed": 0})).messages[0]["content"]
    assert "\\boxed{N}" in system and "ask" not in system
    assert "ask the user" in asyncio.run(reset_env(env_factory("clarify")(), {"seed": 0})).messages[0]["content"]
    with pytest.raises(EnvError, match=r"env 'clarify': ClarifyEnv\(\*\*\{'max_turns': 0\}\) raised ValueError: max_turns"):
        load_env("clarify", {"max_turns": 0})


def test_grm_envs_list_shows_clarify(capsys):
    from grm.cli import main

    assert main(["envs", "list"]) == 0
    out = capsys.readouterr().out
    assert "│ clarify " in out and "grm.envs.clarify:ClarifyEnv" in out and "simulated user" in out


def test_an_episode_through_the_runner_asks_then_answers_and_ends_done_with_success():
    tok = tokenizer(SMOL)
    rows = [{"seed": 3}, {"seed": 10}]
    answers = [task(3).answer, task(10).answer]
    policy = [lambda k, key: [ASK, boxed(answers[key])][min(k, 1)], lambda k, key: boxed(answers[key] + 5)]
    engine = TokenEngine(tok, lambda key, k: policy[key](k, key))
    trajs = run_episodes(engine, tok, ClarifyEnv, rows, SamplingParams(max_new_tokens=48), seeds=[0, 1])
    asked, guessed = trajs
    assert asked.end_reason == guessed.end_reason == "done"
    assert asked.signals == {"success": 1.0, "asked_clarifying_question": 1.0, "turns": 2.0}
    assert guessed.signals == {"success": 0.0, "asked_clarifying_question": 0.0, "turns": 1.0}
    assert [t.role for t in asked.turns] == ["assistant", "user", "assistant", "user"]
    assert asked.turns[1].content == task(3).detail and asked.turns[1].token_ids  # in the context, masked
    assert asked.turns[-1].content == CLOSING and asked.turns[-1].token_ids == []  # after the end: no tokens
    assert task(3).detail in tok.decode(engine.sent[0][1])  # the second turn was generated after the reply
    check_exact(asked, engine, 0, tok)
