"""``builtin:trajectory-logprob``'s template asks about the user's last request before the
assistant's last turn, shows that turn's answer, and leaves out what came after it (a closing line,
the tool result of an episode cut short); without a later request it asks about the task's own,
and when fitting left the request out it says so rather than naming an older one."""

import pytest

from grm.config.paths import builtin_dir
from grm.data.trajectory import Task, ToolCall, Trajectory, Turn
from grm.judges import Sample
from grm.judges.render import render
from grm.judges.runtime import load
from grm.judges.templates import load_template

TASK = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Write a note about rivers."}]


def prompt_text(turns: list[Turn], final: str | None) -> str:
    traj = Trajectory("t", Task({"seed": 0}, TASK), turns=turns, end_reason="done", final_answer=final)
    (stage,) = render(load("builtin:trajectory-logprob"), Sample(prompt="Write a note about rivers.", trajectory=traj))
    return next(m["content"] for m in reversed(stage["request"].messages) if m["role"] == "user")  # "Answer:" follows


def section(text: str, name: str) -> str:
    return text.split(f"[{name}]\n", 1)[1].split("\n\n", 1)[0]


def test_a_follow_up_request_is_the_one_asked_about_and_the_answer_is_the_rewrite():
    text = prompt_text(
        [Turn("assistant", "Rivers flow."), Turn("user", 'Rewrite it with the word "lantern".'), Turn("assistant", "A lantern.")],
        "A lantern.",
    )
    assert section(text, "The user's last request") == 'Rewrite it with the word "lantern".'
    assert section(text, "The assistant's answer to it").startswith("A lantern.")
    assert "assistant: Rivers flow." in text and "assistant: A lantern." not in text  # the answer once, in its place


def test_what_came_after_the_assistants_last_turn_is_left_out():
    closing = "Thanks, that's all I needed."
    text = prompt_text(
        [
            Turn("assistant", "How long is it?"),
            Turn("user", "It is 12 km."),
            Turn("assistant", "\\boxed{12}"),
            Turn("user", closing),
        ],
        "12",
    )
    assert section(text, "The user's last request") == "It is 12 km." and closing not in text


def test_tool_turns_show_their_calls_and_failures_and_a_cut_short_episode_hides_its_last_result():
    call = ToolCall("calculator", {"expression": "2 + 2"}, "c0")
    turns = [
        Turn("assistant", "Let me add.", tool_calls=[call]),
        Turn("tool", "boom", tool_name="calculator", ok=False, error="timeout"),
        Turn("assistant", "Again.", tool_calls=[call], tool_call_error=None),
        Turn("tool", "4", tool_name="calculator"),
    ]
    text = prompt_text(turns, None)
    assert "calls calculator(expression=2 + 2)" in text and "tool (calculator) [failed: timeout]: boom" in text
    assert "tool (calculator): 4" not in text  # after the last assistant turn: not what the answer answered
    assert section(text, "The user's last request") == "Write a note about rivers."  # no later request


@pytest.mark.parametrize("omitted, expect", [(0, "Write a note about rivers."), (3, "(left out for length")])
def test_without_a_later_request_the_tasks_own_is_asked_about_unless_turns_were_left_out(omitted, expect):
    t = load_template(builtin_dir("prompts") / "trajectory-yesno.j2")
    turns = [
        {"role": "assistant", "content": "Rivers flow.", "tool_name": None, "ok": True, "tool_calls": [], "tool_call_error": None}
    ]
    from grm.judges.trajectory_view import answered

    shown = {"task": TASK, "turns": turns, "omitted": omitted} | answered(turns, TASK, omitted)
    text = t.render(response="Rivers flow.", trajectory=shown)
    assert section(text, "The user's last request").startswith(expect)


def test_answered_is_the_turns_before_the_last_answer_and_the_last_request_among_them():
    from grm.judges.trajectory_view import answered

    task = [{"role": "system", "content": "s"}, {"role": "user", "content": "first ask"}]
    turns = [
        {"role": "assistant", "content": "a1"},
        {"role": "user", "content": "second ask"},
        {"role": "assistant", "content": "a2"},
        {"role": "user", "content": "bye"},
    ]
    got = answered(turns, task, 0)
    assert [t["content"] for t in got["before_answer"]] == ["a1", "second ask"] and got["last_request"] == "second ask"
    assert answered(turns[:1], task, 0) == {"before_answer": [], "last_request": "first ask"}  # the task's own
    assert answered(turns[2:3], task, 2)["last_request"] is None  # the request was left out to fit
    assert answered([], [], 0) == {"before_answer": [], "last_request": None}
