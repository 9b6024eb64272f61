"""Sync mode keeps every core busy: a phase that runs alone takes the idle pools' cores too
(pools' ``phase_threads``), and the policy's batch pass waits for the judges so two phases
never share those cores. Async mode, streamed chunks and ``sync_threads: pool`` keep each process
to its pool's share."""

import pytest

from grm.orchestrator.pools import Pool, phase_threads, role_pools
from grm.orchestrator.roles import JudgeHandle
from tests.unit.orchestrator.fakes import fake_actor_judge, fake_policy, gather_step
from tests.unit.orchestrator.test_scheduler import config, make


def placed(cfg, judges: list[str], nodes: dict[str, tuple[str, ...]]) -> dict[str, Pool]:
    """Pools as ``create_pools`` would return them, with the node of each bundle given."""
    roles = role_pools(cfg, judges)
    ranks = {cfg.policy.pool: cfg.train.backend.ranks}
    return {n: Pool(n, cfg.pools[n], None, roles[n], ranks.get(n, 1), nodes[n]) for n in cfg.pools if roles[n]}


def spec(**over):
    from grm.config.pipeline import PipelineSpec

    data = {
        "name": "t",
        "pools": {"train": {"cpus": 1}, "judge": {"cpus": 1}},
        "policy": {"spec": "builtin:smollm2-135m-instruct", "pool": "train"},
        "judges": [{"spec": "builtin:helpfulness-pointwise-logprob", "pool": "judge"}],
        "data": {"prompts": "builtin:arith-prompts"},
        "algorithm": {"type": "grpo", "group_size": 2, "prompts_per_step": 2},
        "train": {"micro_batch_size": 2},
        "schedule": {"mode": "sync"},
    }
    for k, v in over.items():
        data[k] = v if not isinstance(v, dict) else {**data.get(k, {}), **v}
    return PipelineSpec.model_validate(data)


JUDGE = ["helpfulness-pointwise-logprob"]


def test_sync_phases_take_the_idle_pools_cores():
    cfg = spec()
    threads = phase_threads(cfg, placed(cfg, JUDGE, {"train": ("n1",), "judge": ("n1",)}))
    assert threads == {"policy": 2, "judge:helpfulness-pointwise-logprob": 2}


def test_async_streamed_and_pool_mode_keep_the_pool_share():
    nodes = {"train": ("n1",), "judge": ("n1",)}
    for cfg in (
        spec(schedule={"mode": "async"}),
        spec(schedule={"mode": "sync", "stream_prompts": 1}),
        spec(schedule={"mode": "sync", "sync_threads": "pool"}),
    ):
        assert phase_threads(cfg, placed(cfg, JUDGE, nodes)) == {}


def test_judges_of_one_node_share_its_cores_and_other_nodes_are_not_counted():
    cfg = spec(
        pools={"train": {"cpus": 2}, "judge": {"cpus": 2}, "far": {"cpus": 1}},
        judges=[
            {"spec": "builtin:helpfulness-pointwise-logprob", "pool": "judge", "replicas": 2},
            {"spec": "builtin:pointwise-logprob", "pool": "far"},
        ],
    )
    names = ["helpfulness-pointwise-logprob", "pointwise-logprob"]
    threads = phase_threads(cfg, placed(cfg, names, {"train": ("n1",), "judge": ("n1",), "far": ("n2",)}))
    # node n1 has 4 CPUs: the policy alone in its phases, the two replicas of one judge sharing them
    assert threads["policy"] == 4
    assert threads["judge:helpfulness-pointwise-logprob#0"] == threads["judge:helpfulness-pointwise-logprob#1"] == 2
    assert threads["judge:pointwise-logprob"] == 1  # alone on n2, whose only CPU is its pool's


def test_policy_ranks_share_their_node_and_a_reference_actor_gets_it_alone():
    cfg = spec(
        pools={"train": {"cpus": 2}, "judge": {"cpus": 1}, "ref": {"cpus": 1}},
        reference={"pool": "ref"},
        train={"micro_batch_size": 2, "backend": {"type": "torch", "ranks": 2}},
    )
    threads = phase_threads(cfg, placed(cfg, JUDGE, {"train": ("n1", "n1"), "judge": ("n1",), "ref": ("n1",)}))
    assert threads["policy#0"] == threads["policy#1"] == 2  # 4 CPUs on the node, two ranks
    assert threads["reference"] == 4 and threads["judge:helpfulness-pointwise-logprob"] == 4


def test_unknown_nodes_leave_threads_alone():
    cfg = spec()
    assert phase_threads(cfg, placed(cfg, JUDGE, {"train": (), "judge": ()})) == {}


@pytest.mark.parametrize("sync_threads,alone", [("node", True), ("pool", False)])
def test_the_batch_pass_waits_for_the_judges_when_phases_run_alone(sync_threads, alone):
    from grm.orchestrator.scheduler import early_batch_pass

    sched_cfg = config(schedule={"mode": "sync", "sync_threads": sync_threads})
    assert early_batch_pass(sched_cfg) is not alone
    policy = fake_policy()
    actor = fake_actor_judge()
    sched, _, _ = make(sched_cfg, [JudgeHandle("model", 1.0, True, actor=actor)], policy=policy)
    running_at_prepare = []
    inner = policy.prepare.fn
    policy.prepare.fn = lambda rollouts: running_at_prepare.append(len(sched.dispatch.running)) or inner(rollouts)
    work = sched.take(0)
    gather_step(sched, work, early=early_batch_pass(sched_cfg))
    assert len(policy.prepare.calls) == 1 and work.prepared is not None
    assert running_at_prepare == ([0] if alone else [1])  # alone: no judge call in flight beside it


def test_with_dynamic_filtering_the_batch_pass_waits_for_the_final_groups():
    """Filtering may swap groups after judging: a pass queued before it could be thrown away."""
    from grm.orchestrator.scheduler import early_batch_pass

    assert early_batch_pass(config(schedule={"mode": "async"}))
    assert not early_batch_pass(config(schedule={"mode": "async"}, algorithm={"dynamic_filtering": True}))
