"""Episodes as rollouts: the trained tokens of an episode are exactly its assistant turns' ids,
the observations between them are context (loss mask 0), and staleness counts from the first turn."""

import math

import pytest
import torch

from grm.data.prompts import Prompt
from grm.data.trajectory import Task, Trajectory, Turn
from grm.orchestrator.episodes import as_rollout, episode_metrics
from grm.training import TrainBatch

PROMPT = [1, 2, 3]
TURN1, OBS, TURN2 = [10, 11, 12], [20, 21], [30, 31]


def episode(success=1.0, end="done", v1=4, v2=5):
    return Trajectory(
        id="s0r0g0/0",
        task=Task(row={"seed": 1}, messages=[{"role": "user", "content": "q"}]),
        prompt_ids=list(PROMPT),
        turns=[
            Turn("assistant", "call", token_ids=list(TURN1), logprobs=[-0.1, -0.2, -0.3], policy_version=v1),
            Turn("tool", "42", token_ids=list(OBS), tool_name="calculator"),
            Turn("assistant", "Answer: 42", token_ids=list(TURN2), logprobs=[-0.4, -0.5], policy_version=v2),
        ],
        end_reason=end,
        signals={"success": success},
        final_answer="42",
    )


def test_an_episode_rollout_trains_only_the_policys_tokens():
    p = Prompt(id="p", text="q", reference=None)
    r = as_rollout(episode(), "s0r0g0/0", p, "s0r0g0", version=9)
    assert r.prompt_ids == PROMPT and r.token_ids == TURN1 + OBS + TURN2
    assert r.mask == [1, 1, 1, 0, 0, 1, 1]
    assert r.logprobs == pytest.approx([-0.1, -0.2, -0.3, 0.0, 0.0, -0.4, -0.5])
    assert r.version == 4  # the first turn's: async staleness counts from the episode's start
    assert r.text == "42" and r.sample().trajectory is r.trajectory and r.sample().response == "42"
    batch = TrainBatch.from_sequences(
        [r.prompt_ids], [r.token_ids], pad_id=0, completion_masks=[r.mask], behaviour_logprobs=[r.logprobs]
    )
    # target t predicts token t + 1: the trained targets are exactly the assistant turns' ids
    trained = [int(batch.input_ids[0, t + 1]) for t in range(batch.loss_mask.shape[1]) if batch.loss_mask[0, t] == 1]
    assert trained == TURN1 + TURN2
    lp = batch["behaviour_logprobs"][0][batch.loss_mask[0] == 1]
    assert torch.allclose(lp, torch.tensor([-0.1, -0.2, -0.3, -0.4, -0.5]))
    with pytest.raises(ValueError, match="completion mask has 2 entries for 7 tokens"):
        TrainBatch.from_sequences([r.prompt_ids], [r.token_ids], pad_id=0, completion_masks=[[1, 1]])


def test_an_episode_that_never_spoke_takes_the_engines_version_and_plain_rows_train_every_token():
    t = episode()
    t.turns = []
    t.end_reason = "env_error"
    r = as_rollout(t, "x/0", Prompt(id="p", text="q", reference=None), "x", version=7)
    assert r.version == 7 and r.token_ids == [] and r.mask == []
    plain = TrainBatch.from_sequences([[1, 2]], [[5, 6]], pad_id=0, completion_masks=[None])
    assert plain.loss_mask.tolist() == [[0.0, 1.0, 1.0]]


def test_episode_metrics_average_signals_and_share_end_reasons():
    m = episode_metrics([episode(1.0), episode(0.0, end="max_turns"), episode(1.0)])
    assert m["env/success"] == pytest.approx(2 / 3) and m["env/turns"] == 2
    assert m["env/end/done"] == pytest.approx(2 / 3) and m["env/end/max_turns"] == pytest.approx(1 / 3)
    assert episode_metrics([]) == {} and not any(math.isnan(v) for v in m.values())


def test_the_env_block_names_a_shipped_environment_or_a_file_found_beside_the_pipeline(tmp_path):
    from grm.config import ConfigError
    from grm.config.env import EnvSpec
    from grm.config.resolve import load_pipeline

    assert EnvSpec(type="calc").target == "grm.envs.calc:CalcEnv"
    for bad, why in (
        ({"type": "nope"}, "neither python nor a shipped environment"),
        ({"type": "python"}, "needs path"),
        ({"type": "python", "path": "envs/x.py"}, "is not FILE.py:"),
        ({"type": "calc", "path": "x.py:C"}, "only for type: python"),
    ):
        with pytest.raises(ValueError, match=why):
            EnvSpec(**bad)
    (tmp_path / "envs").mkdir()
    (tmp_path / "envs" / "mine.py").write_text("class Mine:\n    def reset(self, row): ...\n    def step(self, m): ...\n")
    text = (
        "name: e\npools: {p: {cpus: 1}}\npolicy: {spec: builtin:smollm2-135m-instruct, pool: p}\n"
        "judges: [{spec: builtin:numeric-answer}]\ndata: {prompts: builtin:calc-train}\n"
        "algorithm: {kl: {coef: 0}}\nenv: {type: python, path: ENV}\n"
    )
    (tmp_path / "ok.yaml").write_text(text.replace("ENV", "envs/mine.py:Mine"))
    env = load_pipeline(tmp_path / "ok.yaml").spec.env
    assert env is not None and env.target == f"{tmp_path / 'envs' / 'mine.py'}:Mine"  # absolute for the actors
    (tmp_path / "missing.yaml").write_text(text.replace("ENV", "envs/gone.py:Mine"))
    with pytest.raises(ConfigError, match=r"missing.yaml:7.*envs/gone.py not found"):
        load_pipeline(tmp_path / "missing.yaml")
    (tmp_path / "anchor.yaml").write_text(text.replace("ENV", "envs/mine.py:Mine") + "rollout: {greedy_anchor: true}\n")
    with pytest.raises(ConfigError, match="greedy_anchor"):
        load_pipeline(tmp_path / "anchor.yaml")
    with pytest.raises(ValueError, match="workers: 2 needs a pool"):
        EnvSpec(type="calc", workers=2)
    (tmp_path / "pool.yaml").write_text(text.replace("ENV", "envs/mine.py:Mine, pool: tools"))
    with pytest.raises(ConfigError, match="env.pool 'tools' is not a declared pool"):
        load_pipeline(tmp_path / "pool.yaml")


def test_environment_workers_are_placed_on_their_pool_and_take_no_thread_share():
    from grm.config.pipeline import PipelineSpec
    from grm.orchestrator.env_workers import env_roles
    from grm.orchestrator.pools import Pool, phase_threads, role_pools

    data = {
        "name": "t",
        "pools": {"train": {"cpus": 1}, "judge": {"cpus": 2}, "tools": {"cpus": 1}},
        "policy": {"spec": "builtin:smollm2-135m-instruct", "pool": "train"},
        "judges": [{"spec": "builtin:helpfulness-pointwise-logprob", "pool": "judge"}],
        "data": {"prompts": "builtin:calc-train"},
        "algorithm": {"group_size": 2, "prompts_per_step": 2, "kl": {"coef": 0}},
        "train": {"micro_batch_size": 2},
        "env": {"type": "calc", "pool": "judge", "workers": 3},
    }
    cfg = PipelineSpec.model_validate(data)
    roles = role_pools(cfg, ["helpfulness-pointwise-logprob"])
    assert roles["judge"] == ["judge:helpfulness-pointwise-logprob", "env#0", "env#1", "env#2"] and roles["tools"] == []
    assert env_roles(cfg.env) == ["env#0", "env#1", "env#2"]
    pool = Pool("judge", cfg.pools["judge"], None, roles["judge"], 1, ("n1",))
    judge = "judge:helpfulness-pointwise-logprob"
    assert pool.processes == [judge] and pool.threads_of(judge) == 2
    pools = {"train": Pool("train", cfg.pools["train"], None, roles["train"], 1, ("n1",)), "judge": pool}
    assert phase_threads(cfg, pools) == {"policy": 3, "judge:helpfulness-pointwise-logprob": 3}
    own = PipelineSpec.model_validate({**data, "env": {"type": "calc", "pool": "tools"}})
    assert role_pools(own, ["helpfulness-pointwise-logprob"])["tools"] == ["env#0"]


def _credited(faulty, advantage):
    from grm.judges.types import JudgeResult
    from grm.orchestrator.episodes import process_credit
    from grm.orchestrator.types import Group

    p = Prompt(id="p", text="q", reference=None)
    r = as_rollout(episode(), "g/0", p, "g", version=0)
    plain = as_rollout(episode(), "g/1", p, "g", version=0)
    judged = JudgeResult(judge="j", score=3.0, reward=0.3, faulty_turn=faulty)
    g = Group("g", [r, plain], judged={"j": [judged, JudgeResult(judge="j", score=3.0, reward=0.3)]})
    batch = TrainBatch.from_sequences(
        [r.prompt_ids, plain.prompt_ids], [r.token_ids, plain.token_ids], pad_id=0, completion_masks=[r.mask, plain.mask]
    )
    adv, credit = process_credit(torch.tensor([advantage, advantage]), batch.loss_mask, batch.ids or ("g/0", "g/1"), [g])
    return adv, credit, batch


def test_process_credit_spares_the_turns_before_the_first_faulty_one():
    # turns: 0 assistant (3 tokens), 1 tool (2 context tokens), 2 assistant (2 tokens); the judge names turn 2
    adv, credit, batch = _credited(2, -1.0)
    trained = adv[0][batch.loss_mask[0] == 1].tolist()
    assert trained == [0.0, 0.0, 0.0, -1.0, -1.0]  # turn 0 is not blamed, the faulty turn is
    assert adv[1][batch.loss_mask[1] == 1].tolist() == [-1.0] * 5  # no faulty turn named: unchanged
    assert credit == {"g/0": [0.0, 0.0, -1.0]}
    adv, credit, _ = _credited(2, 0.5)  # a positive advantage reaches every turn
    assert adv[0][batch.loss_mask[0] == 1].tolist() == [0.5] * 5
    adv, credit, _ = _credited("none", -1.0)  # the judge found no faulty turn: the episode's advantage
    assert adv[0][batch.loss_mask[0] == 1].tolist() == [-1.0] * 5 and credit == {}
    adv, _, _ = _credited(0, -1.0)  # the first turn was already faulty: all blamed
    assert adv[0][batch.loss_mask[0] == 1].tolist() == [-1.0] * 5
