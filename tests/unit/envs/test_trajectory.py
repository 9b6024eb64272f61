"""The trajectory type: the training view trains exactly the policy's own tokens with their recorded
log-probs, the JSON form round-trips and names a damaged field, the judge view cuts observations."""

import json
import math

import pytest

from grm.data.text_budget import cut_text
from grm.data.trajectory import Task, ToolCall, Trajectory, TrajectoryError, Turn


def three_turns() -> Trajectory:
    """prompt [1 2 3] | assistant [10 11 12] (v4, a tool call) | tool [20 21] | assistant [30 31] (v5)."""
    call = ToolCall("calculator", {"expression": "2+3"}, "call_0_0")
    return Trajectory(
        id="ep-1",
        task=Task(
            {"seed": 3}, [{"role": "user", "content": "What is 2+3?"}], [{"type": "function", "function": {"name": "calculator"}}]
        ),
        prompt_ids=[1, 2, 3],
        turns=[
            Turn(
                "assistant", '<tool_call>{"name": "calculator"}</tool_call>', [10, 11, 12], [-0.1, -0.2, -0.3], 4, "stop", [call]
            ),
            Turn("tool", "5", [20, 21], tool_name="calculator", tool_call_id="call_0_0", seconds=0.01),
            Turn("assistant", "\\boxed{5}", [30, 31], [-0.5, -0.6], 5, "stop"),
        ],
        end_reason="done",
        signals={"success": 1.0, "tool_calls": 1.0},
        final_answer="5",
    )


def test_training_view_masks_exactly_the_policy_tokens_with_their_logprobs_and_versions():
    v = three_turns().training_view()
    assert v.token_ids == [1, 2, 3, 10, 11, 12, 20, 21, 30, 31]
    assert v.loss_mask == [0, 0, 0, 1, 1, 1, 0, 0, 1, 1]
    assert v.old_logprobs == [0.0, 0.0, 0.0, -0.1, -0.2, -0.3, 0.0, 0.0, -0.5, -0.6]
    assert v.versions == [-1, -1, -1, 4, 4, 4, -1, -1, 5, 5]
    assert v.turn_index == [-1, -1, -1, 0, 0, 0, 1, 1, 2, 2]
    assert v.prompt_len == 3
    # the trained tokens are the policy's own ids, in order, and nothing else
    assert [t for t, m in zip(v.token_ids, v.loss_mask, strict=True) if m] == [10, 11, 12, 30, 31]
    # TrainBatch alignment: position t is about target token t + 1
    mask, lps = v.targets()
    assert mask == [0, 0, 1, 1, 1, 0, 0, 1, 1] and lps == [0.0, 0.0, -0.1, -0.2, -0.3, 0.0, 0.0, -0.5, -0.6]


def test_an_episode_without_generated_tokens_has_an_all_zero_mask():
    t = Trajectory("e", Task({}, []), prompt_ids=[1, 2], turns=[Turn("user", "hi", [5])])
    v = t.training_view()
    assert v.loss_mask == [0, 0, 0] and v.prompt_len == 3


@pytest.mark.parametrize("logprobs", [None, [-0.1], [-0.1, -0.2, -0.3, -0.4]])
def test_an_assistant_turn_without_one_logprob_per_token_cannot_be_trained(logprobs):
    t = three_turns()
    t.turns[0].logprobs = logprobs
    with pytest.raises(TrajectoryError, match=r"ep-1: turn 0 \(assistant\) has 3 token ids"):
        t.training_view()


def test_first_version_is_the_first_assistant_turns():
    assert three_turns().first_version == 4
    assert Trajectory("e", Task({}, [])).first_version is None


def test_json_round_trip_keeps_every_field():
    t = three_turns()
    text = json.dumps(t.to_dict())
    back = Trajectory.from_dict(json.loads(text))
    assert back == t
    assert json.loads(text)["trajectory_version"] == 1


def test_a_nan_signal_written_as_null_reads_back_as_nan():
    d = three_turns().to_dict()
    d["signals"]["success"] = None
    assert math.isnan(Trajectory.from_dict(d).signals["success"])


@pytest.mark.parametrize(
    "damage,message",
    [
        (lambda d: d.update(trajectory_version=2), "trajectory_version 2; this grm reads version 1"),
        (lambda d: d.pop("trajectory_version"), "trajectory_version None"),
        (lambda d: d.update(end_reason="bored"), "end_reason 'bored'"),
        (lambda d: d["turns"][1].update(role="robot"), r"turns\[1\].role: 'robot'"),
        (lambda d: d["turns"][0].update(token_ids=[1, "2"]), r"turns\[0\].token_ids: expected a list of integers"),
        (lambda d: d["turns"][0].update(logprobs=["x"]), r"turns\[0\].logprobs: expected a list of numbers"),
        (lambda d: d["turns"][0].update(ok="yes"), r"turns\[0\].ok: expected bool, found str"),
        (lambda d: d["turns"][0]["tool_calls"][0].update(arguments=[]), r"tool_calls\[0\].arguments: expected dict"),
        (lambda d: d["signals"].update(success="high"), "signals.success: expected a number"),
        (lambda d: d.update(prompt_ids=None), "prompt_ids: expected list, found NoneType"),
        (lambda d: d["task"].pop("messages"), "messages: expected list"),
        # numbers JSON holds but a float does not, and task parts of the wrong shape (a crafted file)
        (lambda d: d["turns"][0].update(logprobs=[10**400]), r"turns\[0\].logprobs: expected a list of numbers"),
        (lambda d: d["turns"][0].update(seconds=10**400), r"turns\[0\].seconds: a number too large for a float"),
        (lambda d: d["signals"].update(success=10**400), "signals.success: expected a number"),
        (lambda d: d["task"].update(messages=[5, None]), r"task.messages\[0\]: expected a message object"),
        (lambda d: d["task"].update(messages=[{"role": 5, "content": "x"}]), r"task.messages\[0\]"),
        (lambda d: d["task"].update(tools=[{"function": 5}]), r"task.tools\[0\]: expected a tool schema object"),
        (lambda d: d["task"].update(tools=["calc"]), r"task.tools\[0\]"),
    ],
)
def test_from_dict_names_the_trajectory_and_the_bad_field(damage, message):
    d = three_turns().to_dict()
    damage(d)
    with pytest.raises(TrajectoryError, match=message) as e:
        Trajectory.from_dict(d)
    assert str(e.value).startswith("trajectory ep-1")


def test_from_dict_names_a_huge_id_cut_short():
    d = three_turns().to_dict()
    d["id"], d["trajectory_version"] = "x" * 5_000_000, 2
    with pytest.raises(TrajectoryError) as e:
        Trajectory.from_dict(d)
    assert len(str(e.value)) < 300 and "xxx..." in str(e.value)


def test_from_dict_refuses_a_non_object():
    with pytest.raises(TrajectoryError, match="expected an object, found list"):
        Trajectory.from_dict([])


def test_judge_view_cuts_each_observation_to_the_budget_and_counts_the_cuts():
    t = three_turns()
    t.turns[1].content = "A" * 500 + "Z" * 500
    t.turns.append(Turn("user", "short reply"))
    v = t.view_for_judge(90)
    obs = v.turns[1]
    assert v.cuts == 1 and obs["cut_for_judge"] and not v.turns[3]["cut_for_judge"]
    head, note, tail = obs["content"].split("\n")
    assert head == "A" * 60 and tail == "Z" * 30 and note == "[... 910 characters cut ...]"
    assert v.turns[0]["content"] == t.turns[0].content  # the policy's own text is never cut
    assert v.turns[0]["tool_calls"] == [{"name": "calculator", "arguments": {"expression": "2+3"}}]
    variables = v.variables()
    assert variables["final"] == "5" and variables["tools"] == ["calculator"]
    assert variables["task"] == [{"role": "user", "content": "What is 2+3?"}]


def test_judge_view_with_a_token_count_keeps_each_observation_within_the_budget():
    def words(s: str) -> int:
        return len(s.split())

    t = three_turns()
    t.turns[1].content = " ".join(f"w{i}" for i in range(300))
    v = t.view_for_judge(30, words)
    head, _, tail = v.turns[1]["content"].split("\n")
    assert words(head) + words(tail) <= 30 and v.cuts == 1
    assert head.startswith("w0 w1") and tail.endswith("w299")


def test_judge_view_shows_only_the_signals_it_is_allowed():
    v = three_turns().view_for_judge(100, signals={"tool_calls"})
    assert v.signals == {"tool_calls": 1.0}
    assert three_turns().view_for_judge(100).signals == {"success": 1.0, "tool_calls": 1.0}


def test_cut_text_leaves_text_within_budget_alone_and_handles_a_zero_budget():
    assert cut_text("abc", 3) == ("abc", False)
    text, cut = cut_text("abcdef", 0)
    assert cut and text == "\n[... 6 characters cut ...]\n"
    with pytest.raises(ValueError):
        three_turns().view_for_judge(-1)
