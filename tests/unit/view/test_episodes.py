"""Multi-turn episodes in the sample browser (issue #41 item 5): a samples.jsonl row's trajectory
reaches the page turn by turn, with its loss mask, tool calls, observations, end and credit, every
text bounded; a malformed trajectory is a bad row naming its field. Real HTTP, as the page asks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grm.view.episode import MAX_TEXT_CHARS, MAX_TURNS
from grm.view.run_dir import RunDir
from grm.view.server import start_in_thread
from tests.unit.view.http_probe import request
from tests.unit.view.synthetic import HUGE, episode, episode_row, write_episode_run

STATIC = Path(__file__).parents[3] / "grm" / "view" / "static"


@pytest.fixture
def served(tmp_path):
    run = write_episode_run(tmp_path / "run")
    httpd, url = start_in_thread([str(run)])
    yield url, run
    httpd.shutdown()
    httpd.server_close()


def page(url: str, step: int) -> tuple[dict, int]:
    code, body = request(url, f"/api/d/0/samples?step={step}")
    assert code == 200, body[:300]
    return json.loads(body), len(body)


def by_id(p: dict) -> dict[str, dict]:
    return {r["id"]: r for g in p["groups"] for r in g["rows"]}


def test_an_episode_reaches_the_page_turn_by_turn_with_its_mask_calls_and_credit(served):
    url, _ = served
    p, _ = page(url, 1)
    assert p["bad_rows_total"] == 0 and p["rows"] == 2
    rows = by_id(p)
    ok, fail = rows["s1-g0-0"]["episode"], rows["s1-g0-1"]["episode"]
    assert "trajectory" not in rows["s1-g0-0"] and "turn_credit" not in rows["s1-g0-0"]  # the raw episode is not sent
    assert ok["id"] == "ep-ok" and ok["task"] == [{"role": "user", "content": "What is 7 * 6?", "cut_for_view": False}]
    assert ok["tools"] == ["calc"] and ok["end_reason"] == "done" and ok["signals"] == {"success": 1.0, "tool_errors": 0.0}
    assert [t["role"] for t in ok["turns"]] == ["assistant", "tool", "assistant"] and ok["turns_total"] == 3
    # the loss mask: the policy's turns are trained, the observation and the prompt are context
    assert [t["trained"] for t in ok["turns"]] == [True, False, True]
    assert [t["tokens"] for t in ok["turns"]] == [3, 3, 2]
    assert (ok["prompt_tokens"], ok["policy_tokens"], ok["context_tokens"]) == (4, 5, 7)
    assert ok["mask_problem"] is None and ok["first_version"] == 3
    assert ok["turns"][0]["mean_logprob"] == pytest.approx(-0.2) and ok["turns"][1]["mean_logprob"] is None
    (call,) = ok["turns"][0]["tool_calls"]
    assert call["name"] == "calculator" and call["id"] == "call_0_0"
    assert json.loads(call["arguments"]) == {"expression": "7 * 6 <b>"}
    # credit aligned with every turn, or with the assistant turns alone
    assert [t["credit"] for t in ok["turns"]] == [1.0, None, 0.5]
    assert [t["credit"] for t in fail["turns"]] == [0.25, None, -0.25]
    # a failed observation keeps its marker and reason; the end is recorded
    obs = fail["turns"][1]
    assert obs["ok"] is False and obs["error"] == "timeout" and obs["tool_name"] == "calculator" and obs["seconds"] == 5.0
    assert fail["end_reason"] == "max_turns" and fail["end_detail"] == "turn limit 3"
    # each judge's critique and score come as for any sample, with the process judge's faulty turn
    j = rows["s1-g0-1"]["judges"]["helpfulness"]
    assert j["faulty_turn"] == 1 and j["critiques"] and j["score"] == 6.5


def test_a_huge_observation_is_cut_with_a_note_and_the_answer_stays_small(served):
    url, _ = served
    p, size = page(url, 1)
    obs = by_id(p)["s1-g0-0"]["episode"]["turns"][1]
    assert obs["cut"] is True  # cut by the sandbox already: the marker the file recorded
    assert obs["cut_for_view"] is True and len(obs["content"]) < MAX_TEXT_CHARS + 100
    assert obs["content"].startswith("xxx") and obs["content"].endswith("END")  # head and tail kept
    assert f"[... {HUGE - MAX_TEXT_CHARS} characters cut ...]" in obs["content"]
    assert size < 100_000  # the 1 MB observation is not sent


def test_a_malformed_trajectory_is_a_bad_row_naming_the_field_and_the_step_still_shows(served):
    url, _ = served
    p, _ = page(url, 2)
    assert p["rows"] == 1 and by_id(p)["s2-g0-3"]["episode"]["id"] == "ep-good"
    assert p["bad_rows_total"] == 3
    role, kind, credit = p["bad_rows"]
    assert role.startswith("samples.jsonl line 3: trajectory bad: turns[1].role: 'robot'"), role
    assert role.endswith("expected one of system, user, assistant, tool")
    assert kind == "samples.jsonl line 4: trajectory: expected an object, found str"
    assert credit == "samples.jsonl line 5: turn_credit: 1 values, but the trajectory has 3 turns (2 by the assistant)"


@pytest.mark.parametrize(
    "damage,field",
    [
        (lambda t: t.update(trajectory_version=99), "trajectory_version 99"),
        (lambda t: t["turns"][0].update(token_ids=["a"]), "turns[0].token_ids: expected a list of integers"),
        (lambda t: t["turns"][0]["tool_calls"][0].update(arguments=[1]), "turns[0].tool_calls[0].arguments: expected dict"),
        (lambda t: t.update(end_reason="bored"), "end_reason 'bored'"),
        (lambda t: t["signals"].update(success="yes"), "signals.success: expected a number"),
    ],
)
def test_each_damaged_field_is_named(tmp_path, damage, field):
    traj = episode("ep-x")
    damage(traj)
    run = write_episode_run(tmp_path / "run")
    (run / "samples.jsonl").write_text(json.dumps(episode_row(1, 0, traj)) + "\n")
    p = RunDir(run).sample_page(1)
    assert p["rows"] == 0 and len(p["bad_rows"]) == 1 and field in p["bad_rows"][0], p["bad_rows"]


def test_an_untrainable_episode_still_shows_and_says_why(tmp_path):
    """An assistant turn without one log-prob per token: the trainer refuses its mask, the page says so."""
    traj = episode("ep-lp")
    traj["turns"][2]["logprobs"] = None
    run = write_episode_run(tmp_path / "run")
    (run / "samples.jsonl").write_text(json.dumps(episode_row(1, 0, traj, credit=["x"])) + "\n")
    assert "turn_credit.0" in RunDir(run).sample_page(1)["bad_rows"][0]  # credit must be numbers
    (run / "samples.jsonl").write_text(json.dumps(episode_row(1, 0, traj)) + "\n")
    ep = RunDir(run).sample_page(1)["groups"][0]["rows"][0]["episode"]
    assert ep["mask_problem"] == "trajectory ep-lp: turn 2 (assistant) has 2 token ids and none log-probs"
    assert [t["credit"] for t in ep["turns"]] == [None, None, None]


def test_a_long_episode_sends_its_first_turns_and_counts_the_rest(tmp_path):
    traj = episode("ep-long")
    traj["turns"] = traj["turns"] * 200  # 600 turns
    traj["signals"] = {"nan": None}
    run = write_episode_run(tmp_path / "run")
    (run / "samples.jsonl").write_text(json.dumps(episode_row(1, 0, traj)) + "\n")
    httpd, url = start_in_thread([str(run)])
    try:
        ep = page(url, 1)[0]["groups"][0]["rows"][0]["episode"]
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert len(ep["turns"]) == MAX_TURNS and ep["turns_total"] == 600 and ep["turns"][-1]["index"] == MAX_TURNS - 1
    assert ep["signals"] == {"nan": None}  # a NaN signal (null in the file) stays a gap


def test_the_page_script_inserts_episode_text_as_text_only():
    """The episode renderer builds nodes with el() (text nodes), never parses row text as HTML."""
    js = (STATIC / "episode.js").read_text()
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("):
        assert sink not in js
    html = (STATIC / "index.html").read_text()
    assert html.index("/static/episode.js") < html.index("/static/app.js")
