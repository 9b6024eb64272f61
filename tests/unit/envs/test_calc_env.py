"""The shipped ``calc`` environment through the protocol helpers, driven by scripted policies: a
solved episode has success 1, a wrong answer 0; the splits are disjoint; limits and malformed calls
end or answer the episode with counted signals."""

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grm.data.trajectory import Task, Trajectory, Turn
from grm.envs.base import AssistantMessage, EnvError, Environment, load_env, reset_env, step_env
from grm.envs.calc import SPLITS, TEMPLATES, CalcEnv, answer_value, extract_answer, problem, split_of, task_rows
from grm.envs.tool_calls import parse_tool_calls
from grm.envs.tool_limits import SandboxLimits


def call(expression: str) -> str:
    return (
        f'I will compute it.\n<tool_call>\n{{"name": "calculator", "arguments": {{"expression": "{expression}"}}}}\n</tool_call>'
    )


def run(env: Environment, row: dict, policy: list[str]) -> Trajectory:
    """A minimal episode loop (what the orchestrator's will do, minus tokens and limits)."""

    async def go() -> Trajectory:
        reset = await reset_env(env, row)
        traj = Trajectory("t", Task(row, reset.messages, reset.tools))
        for i, text in enumerate(policy):
            parsed = parse_tool_calls(text, reset.tools, turn=i)
            calls, error = ([], parsed) if not isinstance(parsed, list) else (parsed, None)
            message = AssistantMessage(text, calls, error)
            traj.turns.append(Turn("assistant", text, tool_calls=calls, tool_call_error=error and error.message))
            step = await step_env(env, message)
            for o in step.observations:
                traj.turns.append(Turn(o.role, o.content, tool_name=o.name, tool_call_id=o.tool_call_id, ok=o.ok, error=o.error))
            traj.signals.update(step.signals)
            if step.done:
                traj.end_reason, traj.final_answer = "done", step.final_answer
                break
        return traj

    return asyncio.run(go())


def test_a_scripted_policy_that_uses_the_calculator_solves_the_problem():
    text, answer = problem(3)  # Maya saves 17 dollars every week for 15 weeks ... spends 13 ... gets 17
    assert "Maya saves 17 dollars every week for 15 weeks" in text and answer == 17 * 15 - 13 + 17
    t = run(CalcEnv(), {"seed": 3}, [call("17 * 15 - 13 + 17"), f"So she has \\boxed{{{answer}}} dollars."])
    assert [x.role for x in t.turns] == ["assistant", "tool", "assistant"]
    assert t.turns[1].content == "259" and t.turns[1].tool_name == "calculator" and t.turns[1].tool_call_id == "call_0_0"
    assert t.end_reason == "done" and t.final_answer == "259"
    assert t.signals == {"success": 1.0, "turns": 2.0, "tool_calls": 1.0, "tool_errors": 0.0, "bad_tool_calls": 0.0}


@pytest.mark.parametrize("final", ["\\boxed{258}", "Answer: 260", "I think it is 259 but I will not box it"])
def test_a_wrong_or_missing_answer_has_success_zero(final):
    t = run(CalcEnv(), {"seed": 3}, [final])
    assert t.end_reason == "done" and t.signals["success"] == 0.0


def test_answer_forms():
    assert extract_answer("first \\boxed{3} then \\boxed{ 1,234 }") == "1,234"
    assert extract_answer("The answer is: $56.") == "56"
    assert extract_answer("nothing") is None
    assert [answer_value(s) for s in ("1,234", "$56", "7.0", "7.5", "seven")] == [1234, 56, 7, None, None]


def test_a_malformed_call_and_a_failing_expression_are_answered_and_counted():
    t = run(CalcEnv(), {"seed": 3}, ["<tool_call>{oops}</tool_call>", call("1 / 0"), "\\boxed{259}"])
    assert t.turns[1].role == "user" and t.turns[1].error == "bad_json" and "could not be run" in t.turns[1].content
    assert t.turns[3].content == "error: division by zero" and not t.turns[3].ok
    assert t.signals["success"] == 1.0 and t.signals["bad_tool_calls"] == 1.0 and t.signals["tool_errors"] == 1.0


def test_the_episode_ends_at_max_turns_without_success():
    t = run(CalcEnv(max_turns=2), {"seed": 3}, [call("1+1")] * 5)
    assert len([x for x in t.turns if x.role == "assistant"]) == 2
    assert t.signals["success"] == 0.0 and t.signals["hit_max_turns"] == 1.0


def test_train_and_held_out_problems_are_disjoint_and_every_problem_distinct():
    train = [problem(s)[0] for s in SPLITS["train"]]
    held = [problem(s)[0] for s in SPLITS["held_out"]]
    assert len(set(train)) == len(train) and len(set(held)) == len(held)
    assert not set(train) & set(held)
    assert len(held) >= 8000 and len(train) >= 70000
    assert {text.split(" ")[1] for text in held} == {"bakery", "library", "teacher", "garden"} | {"saves"}  # every template


def test_every_answer_is_a_positive_integer_over_each_templates_whole_space():
    for t in TEMPLATES:
        lows = tuple(lo for lo, _ in t.ranges)
        for p in (0, t.size - 1, t.size // 2):
            assert t.answer(*t.params(p)) > 0
        assert t.params(0) == lows


def test_rows_carry_their_split_and_a_wrong_split_or_seed_is_refused():
    rows = task_rows("held_out", 3)
    assert rows == [{"seed": s, "split": "held_out"} for s in range(10_000_000, 10_000_003)]
    assert split_of(5) == "train" and split_of(9_999_999) is None
    env = CalcEnv()
    with pytest.raises(EnvError, match=r"CalcEnv.reset raised ValueError: seed 5 is not in split 'held_out'"):
        asyncio.run(reset_env(env, {"seed": 5, "split": "held_out"}))
    with pytest.raises(EnvError, match="seed 9999999 is in no split"):
        asyncio.run(reset_env(env, {"seed": 9_999_999}))
    with pytest.raises(EnvError, match="integer 'seed'"):
        asyncio.run(reset_env(env, {"seed": True}))
    with pytest.raises(ValueError, match="has 8190 problems"):
        task_rows("held_out", 2, start=8189)


def test_calc_loads_by_name_with_arguments_and_offers_the_python_tool_when_asked():
    env = load_env("calc", {"max_turns": 3, "python": True, "python_limits": {"timeout_s": 2}})
    reset = asyncio.run(reset_env(env, {"seed": 0}))
    assert [t["function"]["name"] for t in reset.tools] == ["calculator", "python"]
    t = run(env, {"seed": 0}, ['<tool_call>{"name": "python", "arguments": {"code": "print(23*23-17-17)"}}</tool_call>'])
    assert t.turns[1].content == "495\n" and t.turns[1].tool_name == "python"
    with pytest.raises(EnvError, match=r"env 'calc': CalcEnv\(\*\*\{'max_turns': 0\}\) raised ValueError: max_turns"):
        load_env("calc", {"max_turns": 0})


@pytest.mark.parametrize(
    "kwargs,says",
    [
        ({"python": "yes please"}, "python: Input should be a valid boolean (got 'yes please')"),
        ({"python": "yes"}, "python: Input should be a valid boolean (got 'yes')"),
        ({"python": 1}, "python: Input should be a valid boolean (got 1)"),
        ({"max_turns": "3"}, "max_turns: Input should be a valid integer (got '3')"),
        ({"max_turns": True}, "max_turns: expected a number, found a boolean (true)"),
        (
            {"python": True, "python_limits": {"cpu_s": float("inf")}},
            "python_limits: cpu_s: Input should be a valid integer (got inf)",
        ),
        (
            {"python": True, "python_limits": {"memory_mb": True}},
            "python_limits: memory_mb: expected a number, found a boolean (true)",
        ),
        ({"python": True, "python_limits": {"timeot_s": 2}}, "python_limits: timeot_s: Extra inputs are not permitted (got 2)"),
        (
            {"python": True, "python_limits": [1]},
            "python_limits: Input should be a valid dictionary or instance of SandboxLimits (got [1])",
        ),
        ({"python_limits": {"timeout_s": 2}}, "python_limits is given without python: true"),
    ],
)
def test_a_wrong_argument_is_refused_when_the_env_loads_naming_its_field(kwargs, says):
    with pytest.raises(EnvError) as e:
        load_env("calc", kwargs)
    assert f"raised ValueError: {says}" in str(e.value)


_ANY = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=4),
    st.lists(st.integers(), max_size=2),
)


@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(python=_ANY, field=st.sampled_from(sorted(SandboxLimits.model_fields)), value=_ANY)
def test_the_python_tool_is_offered_only_for_true_with_the_limits_given_or_a_message_names_the_field(python, field, value):
    try:
        env = CalcEnv(python=python, python_limits={field: value})
    except ValueError as e:
        said = str(e)
        assert said.startswith(("python: ", f"python_limits: {field}: ", "python_limits is given without")) and "\n" not in said
        assert python is not True or said.startswith(f"python_limits: {field}: ")
        return
    assert python is True and env.tools["python"].limits == SandboxLimits(**{field: value})
