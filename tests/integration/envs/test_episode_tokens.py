"""Episodes on the real SmolLM2-135M-Instruct (hf engine, fp32): the #41 token acceptance. A
3-turn tool episode's trained tokens are exactly the ones the engine sampled (the mask test), the
engine was sent exactly the recorded context each turn, and the trainer's forward pass over the
recorded tokens gives back the recorded log-probs within 1e-4. An environment that raises and one
that never finishes end with their reasons in the same batch without touching it."""

import pytest
import torch

from grm.engines.base import SamplingParams
from grm.envs.base import AssistantMessage, Observation, Reset, Step
from grm.envs.calc import SYSTEM_PROMPT, problem
from grm.envs.episodes import EpisodeLimits, run_episodes
from grm.envs.tools import CalculatorTool
from grm.training.batch import TrainBatch
from grm.training.core import policy_forward

pytestmark = pytest.mark.slow

TOLERANCE = 1e-4
SEEDS = [11, 12, 13]


class ScriptedToolEnv:
    """Whatever the policy writes, each turn is answered by a calculator observation (so a
    135M model's episode has its turns and tool tokens for sure); done after ``turns`` turns.
    ``raise_at``: the step that raises instead."""

    def __init__(self, turns: int | None = 3, raise_at: int | None = None) -> None:
        self.turns, self.raise_at, self.k, self.tool = turns, raise_at, 0, CalculatorTool()

    def reset(self, row):
        return Reset(
            [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": problem(row["seed"])[0]}],
            [self.tool.schema],
        )

    def step(self, message: AssistantMessage) -> Step:
        self.k += 1
        if self.k == self.raise_at:
            raise RuntimeError("the environment broke")
        if self.turns is not None and self.k >= self.turns:
            return Step([], True, {"turns": float(self.k)}, message.content)
        call = message.tool_calls[0] if message.tool_calls else None
        expr = call.arguments.get("expression", "12*3") if call else f"12*3+{self.k}"
        result = self.tool({"expression": str(expr)})
        return Step(
            [Observation("tool", result.text, "calculator", call.id if call else f"call_{self.k}", result.ok, result.reason)]
        )


class Recording:
    """The engine, keeping each request's prompt ids and generation by the request's seed (one
    seed per episode)."""

    def __init__(self, engine):
        self.engine, self.calls, self.turns = engine, [], {}
        self.model_id, self.version = engine.model_id, engine.version

    def generate(self, requests, sampling):
        gens = self.engine.generate(requests, sampling)
        self.calls.append(len(requests))
        for r, g in zip(requests, gens, strict=True):
            self.turns.setdefault(r.seed, []).append((list(r.token_ids), g))
        return gens


def test_a_three_turn_tool_episode_trains_exactly_the_policy_tokens_with_the_trainers_logprobs(smollm2_fp32):
    engine = Recording(smollm2_fp32)
    envs = iter([ScriptedToolEnv(), ScriptedToolEnv(raise_at=2), ScriptedToolEnv(turns=None)])
    rows = [{"seed": 7}, {"seed": 8}, {"seed": 9}]
    sp = SamplingParams(temperature=1.0, max_new_tokens=24)
    trajs = run_episodes(engine, smollm2_fp32.tokenizer, lambda: next(envs), rows, sp, EpisodeLimits(max_turns=3), seeds=SEEDS)
    assert [t.end_reason for t in trajs] == ["done", "env_error", "max_turns"]
    assert "RuntimeError: the environment broke" in trajs[1].end_detail
    assert engine.calls == [3, 3, 2]  # lockstep; the broken episode left after its second turn
    assert [t.role for t in trajs[0].turns] == ["assistant", "tool", "assistant", "tool", "assistant"]
    worst = 0.0
    for seed, traj in zip(SEEDS, trajs, strict=True):
        view = traj.training_view()
        sent, gens = zip(*engine.turns[seed], strict=True)
        # (a) the mask test: the trained tokens are, in order, exactly what the engine sampled
        assert [t for t, m in zip(view.token_ids, view.loss_mask, strict=True) if m] == [t for g in gens for t in g.token_ids]
        assert [lp for lp, m in zip(view.old_logprobs, view.loss_mask, strict=True) if m] == [x for g in gens for x in g.logprobs]
        # every request was exactly the recorded context up to that turn
        starts = [i for i in range(len(view.token_ids)) if view.loss_mask[i] and (i == 0 or not view.loss_mask[i - 1])]
        assert list(sent) == [view.token_ids[:s] for s in starts]
        # (b) the trainer's forward pass over the recorded tokens gives the recorded log-probs back
        ids = torch.tensor([view.token_ids])
        mask, old = view.targets()
        batch = TrainBatch(ids, torch.ones_like(ids), torch.tensor([mask], dtype=torch.float32))
        with torch.no_grad():
            lp = policy_forward(smollm2_fp32.model, batch, False)[0][0]
        diffs = [abs(float(lp[t]) - old[t]) for t in range(len(mask)) if mask[t]]
        assert len(diffs) == sum(len(g.token_ids) for g in gens) > 0
        worst = max(worst, *diffs)
    print(f"max |recorded - trainer log-prob| over {len(trajs)} episodes: {worst:.2e}")
    assert worst < TOLERANCE
