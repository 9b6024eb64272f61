"""Run and eval directories shaped like the recorder's and ``grm eval``'s, without a model."""

from __future__ import annotations

import json
from pathlib import Path

CRITIQUE = "Critique: the answer states 12 but 7 + 6 = 13; the explanation is otherwise clear. <b>bold</b>"


def sample_row(step: int, group: int, k: int, reward: float | None, masked: bool = False) -> dict:
    return {
        "step": step,
        "id": f"s{step}-g{group}-{k}",
        "prompt_id": f"p{group}",
        "group": f"{step}:{group}",
        "prompt": f"What is 7 + {group}? Explain.",
        "response": f"The answer is {7 + group + k}. " + "Because adding gives the sum. " * (k + 1),
        "finish_reason": "length" if k == 1 else "stop",
        "policy_version": step - 1,
        "reward": reward,
        "advantage": None if reward is None else reward - 0.5,
        "judges": {
            "helpfulness": {
                "score": None if masked else 6.5,
                "reward": None if masked else reward,
                "masked": masked,
                "critiques": [CRITIQUE],
                "parsed": [None if masked else 6.5],
            },
            "numeric-answer": None if masked else {"score": 1.0, "reward": 1.0, "masked": False, "critiques": [], "parsed": []},
        },
    }


def write_run(path: Path, steps: int = 2, groups: int = 2, size: int = 2) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.resolved.yaml").write_text("name: quickstart\nalgorithm: {type: grpo}\n")
    with open(path / "samples.jsonl", "w") as fh, open(path / "metrics.jsonl", "w") as mh:
        for s in range(1, steps + 1):
            for g in range(groups):
                for k in range(size):
                    masked = s == 1 and g == 0 and k == 1
                    fh.write(json.dumps(sample_row(s, g, k, None if masked else 0.25 * (k + g), masked)) + "\n")
            m = {
                "step": s,
                "reward_mean": 0.1 * s,
                "reward/helpfulness": 0.2 * s,
                "kl": None,
                "masked": int(s == 1),
                "masked_by_judge": {"helpfulness": int(s == 1)},
                "seconds_rollout": 1.5,
                "judge_share": 0.4,
                "judge_cost/helpfulness/tokens": 100 * s,
                "note": "text is not plotted",
            }
            mh.write(json.dumps(m) + "\n")
    return path


def eval_line(item: str, label: int, verdict: str | None, orders: list, lengths: list[int], judge: str = "pairwise") -> dict:
    samples = [
        {
            "view": v,
            "order": [0, 1] if v == 0 else [1, 0],
            "index": 0,
            "attempt": 0,
            "text": f"{CRITIQUE} (order {v + 1})",
            "parsed": orders[v],
            "error": None,
            "tokens": 10,
        }
        for v in (0, 1)
    ]
    return {
        "judge": judge,
        "item_id": item,
        "kind": "pair",
        "label": label,
        "human_score": None,
        "verdict": verdict,
        "order_verdicts": orders,
        "margin": 0.5,
        "masked": verdict is None,
        "lengths": lengths,
        "parse_failures": 0,
        "samples_total": 2,
        "results": [{"judge": judge, "verdict": verdict, "samples": samples}],
    }


def write_eval(path: Path, verdicts: list | None = None, judge: str = "pairwise") -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.resolved.yaml").write_text(
        f"data: {path / 'data.jsonl'}\nmap: {{prompt: prompt, response_a: a, response_b: b, label: label, id: id}}\n"
        f"judges: [{{name: {judge}, spec_sha256: x}}]\n"
    )
    rows = [
        {"id": "i0", "prompt": "Which is right? 2+2", "a": "4", "b": "five, clearly, after long thought", "label": 1},
        {"id": "i1", "prompt": "Say hi", "a": "hi", "b": "hello there friend", "label": 2},
        {"id": "i2", "prompt": "Capital of France?", "a": "Paris is the capital.", "b": "Lyon", "label": 1},
    ]
    (path / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    # what grm eval records beside its results (the viewer reads only this, never data.jsonl)
    items = [
        {"v": 1, "id": r["id"], "kind": "pair", "prompt": r["prompt"], "responses": [r["a"], r["b"]], "label": r["label"]}
        for r in rows
    ]
    (path / "items.jsonl").write_text("".join(json.dumps(x) + "\n" for x in items))
    verdicts = verdicts or [("1", ["1", "1"]), ("1", ["2", "1"]), (None, [None, "1"])]
    lines = [
        eval_line(r["id"], r["label"], v, orders, [len(r["a"]), len(r["b"])], judge)
        for r, (v, orders) in zip(rows, verdicts, strict=True)
    ]
    (path / "results.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    (path / "metrics.json").write_text(json.dumps({"judges": {judge: {"items": 3, "pairs": {"accuracy_average": 0.5}}}}))
    return path


HUGE = 1_000_000
"""Characters of the observation a tool printed in ``episode(huge=True)`` (10 MB is the sandbox's cap)."""


def episode(eid: str, *, failed: bool = False, huge: bool = False) -> dict:
    """``Trajectory.to_dict()`` of a calculator episode: user task | assistant (a tool call) | tool
    observation (ok, or a timeout) | assistant answer; ``huge``: the observation is ``HUGE`` chars."""
    from grm.data.trajectory import Task, ToolCall, Trajectory, Turn

    call = ToolCall("calculator", {"expression": "7 * 6 <b>"}, "call_0_0")
    out = "x" * (HUGE - 3) + "END" if huge else "42 <script>alert(1)</script>"
    tool = Turn("tool", out, [20, 21, 22], tool_name="calculator", tool_call_id="call_0_0", seconds=0.2, cut=huge)
    if failed:
        tool = Turn("tool", "", [20], tool_name="calculator", tool_call_id="call_0_0", ok=False, error="timeout", seconds=5.0)
    tools = [{"type": "function", "function": {"name": "calc"}}]
    traj = Trajectory(
        id=eid,
        task=Task({"seed": 7}, [{"role": "user", "content": "What is 7 * 6?"}], tools),
        prompt_ids=[1, 2, 3, 4],
        turns=[
            Turn("assistant", "<tool_call>calculator</tool_call>", [10, 11, 12], [-0.1, -0.2, -0.3], 3, "stop", [call]),
            tool,
            Turn("assistant", "The answer is \\boxed{42}.", [30, 31], [-0.5, -0.5], 3, "stop"),
        ],
        end_reason="max_turns" if failed else "done",
        end_detail="turn limit 3" if failed else None,
        signals={"success": 0.0 if failed else 1.0, "tool_errors": float(failed)},
        final_answer=None if failed else "42",
    )
    return traj.to_dict()


def episode_row(step: int, k: int, traj: object, credit: list | None = None) -> dict:
    """A samples.jsonl row of an episode: the final answer as the response, a process judge's result."""
    row = sample_row(step, 0, k, 0.5 * k)
    row.update(response="42", trajectory=traj)
    row["judges"]["helpfulness"]["faulty_turn"] = 1
    if credit is not None:
        row["turn_credit"] = credit
    return row


def write_episode_run(path: Path) -> Path:
    """A run whose step 1 is two episodes of one group (one with a huge observation) and whose step 2
    holds malformed ones: a bad role, a trajectory that is a string, a turn_credit of the wrong length."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.resolved.yaml").write_text("name: episodes\nalgorithm: {type: grpo}\n")
    bad_role = episode("bad")
    bad_role["turns"][1]["role"] = "robot"
    rows = [
        episode_row(1, 0, episode("ep-ok", huge=True), credit=[1.0, None, 0.5]),
        episode_row(1, 1, episode("ep-fail", failed=True), credit=[0.25, -0.25]),
        episode_row(2, 0, bad_role),
        episode_row(2, 1, "not a trajectory"),
        episode_row(2, 2, episode("ep-credit"), credit=[1.0]),
        episode_row(2, 3, episode("ep-good")),
    ]
    (path / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (path / "metrics.jsonl").write_text(json.dumps({"step": 1, "reward_mean": 0.5}) + "\n")
    return path
