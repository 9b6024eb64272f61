"""The #41 acceptance for agent code: an OpenAI-client agent loop through the policy endpoint, on the
real SmolLM2-135M-Instruct (hf engine, fp32), gives the same per-turn token ids and log-probs as the
direct episode runner over the same environment logic with the same seeds. Each episode runs alone
on both paths, so the engine's batches are the same (one request each)."""

import json

import openai
import pytest

from grm.engines.base import SamplingParams
from grm.envs.agent import run_agent_episodes
from grm.envs.calc import SYSTEM_PROMPT, problem
from grm.envs.episodes import EpisodeLimits, run_episodes
from grm.envs.tools import CalculatorTool
from tests.integration.envs.test_episode_tokens import ScriptedToolEnv

pytestmark = pytest.mark.slow

TOLERANCE = 1e-6
TURNS = 3
REPLIES: dict[int, list] = {}
"""Row seed -> what each response carried: (token_ids, log-probs)."""


def calculator_agent(row, base_url, model):
    """``ScriptedToolEnv`` as an agent loop: the task and the calculator tool, each turn's first tool
    call run by the calculator (a fixed expression when there is none), done after three turns."""
    client = openai.OpenAI(base_url=base_url, api_key="none", max_retries=0)
    tool = CalculatorTool()
    messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": problem(row["seed"])[0]}]
    for k in range(1, TURNS + 1):
        reply = client.chat.completions.create(model=model, messages=messages, tools=[tool.schema])
        choice = reply.choices[0]
        REPLIES.setdefault(row["seed"], []).append(
            (choice.model_extra["token_ids"], [x.logprob for x in choice.logprobs.content])
        )
        if k == TURNS:
            return {"signals": {"turns": float(k)}, "final_answer": choice.message.content}
        call = choice.message.tool_calls[0] if choice.message.tool_calls else None
        expr = json.loads(call.function.arguments).get("expression", "12*3") if call else f"12*3+{k}"
        messages.append(choice.message.model_dump(exclude_none=True))
        messages.append(
            {
                "role": "tool",
                "name": "calculator",
                "tool_call_id": call.id if call else f"call_{k}",
                "content": tool({"expression": str(expr)}).text,
            }
        )
    return None


def test_an_openai_client_agent_loop_gives_the_direct_paths_token_ids_and_logprobs(smollm2_fp32):
    tok = smollm2_fp32.tokenizer
    sp = SamplingParams(temperature=1.0, max_new_tokens=24)
    limits = EpisodeLimits(max_turns=TURNS)
    worst, policy_tokens = 0.0, 0
    for row, seed in (({"seed": 7}, 11), ({"seed": 8}, 12), ({"seed": 9}, 13)):
        (direct,) = run_episodes(smollm2_fp32, tok, ScriptedToolEnv, [row], sp, limits, seeds=[seed])
        (served,) = run_agent_episodes(smollm2_fp32, tok, calculator_agent, [row], sp, limits, seeds=[seed])
        # done, or bad_tool_call when a 135M model writes three malformed calls: the same on both paths
        assert served.end_reason == direct.end_reason in ("done", "bad_tool_call"), (direct.end_detail, served.end_detail)
        assert served.prompt_ids == direct.prompt_ids
        assert (
            [t.role for t in served.turns]
            == [t.role for t in direct.turns]
            == ["assistant", "tool"] * (TURNS - 1) + ["assistant"]
        )
        for a, b in zip(served.turns, direct.turns, strict=True):
            assert a.token_ids == b.token_ids and a.content == b.content
            if a.role == "assistant":
                assert len(a.logprobs) == len(b.logprobs) == len(a.token_ids) > 0
                worst = max(worst, *(abs(x - y) for x, y in zip(a.logprobs, b.logprobs, strict=True)))
                policy_tokens += len(a.token_ids)
        assert served.training_view().token_ids == direct.training_view().token_ids
        # what the endpoint answered is what it recorded
        assert REPLIES[row["seed"]] == [(t.token_ids, t.logprobs) for t in served.turns if t.role == "assistant"]
        if direct.end_reason == "done":
            assert served.signals == direct.signals == {"turns": float(TURNS)}
    print(f"max |endpoint - direct log-prob| over {policy_tokens} policy tokens: {worst:.2e}")
    assert worst <= TOLERANCE
