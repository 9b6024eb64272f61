"""Policy worker groups without Ray: bundle layout, missing resources, how work is cut across ranks
and put back together."""

from types import SimpleNamespace

from grm.config.pipeline import PipelineSpec, PoolSpec
from grm.orchestrator.policy_group import gather_rollouts, split_rollout
from grm.orchestrator.pools import bundles_of, missing_resources, strategy_of


def test_a_multi_rank_pool_has_one_bundle_per_rank_spread_over_its_nodes():
    one = PoolSpec(cpus=4, gpus=2)
    assert bundles_of(one) == [{"CPU": 4.0, "GPU": 2.0}] and strategy_of(one, 1) == "STRICT_PACK"
    assert bundles_of(one, ranks=2) == [{"CPU": 2.0, "GPU": 1.0}] * 2
    two_nodes = PoolSpec(cpus=8, gpus=4, nodes=2, resources={"fast": 2})
    b = bundles_of(two_nodes, ranks=8)  # 4 ranks per node, a quarter of a node each
    assert len(b) == 8 and b[0] == {"CPU": 2.0, "GPU": 1.0, "fast": 0.5}
    assert strategy_of(two_nodes, 8) == "SPREAD"  # several per node: create_pools checks the nodes
    assert strategy_of(two_nodes, 2) == "STRICT_SPREAD"  # one per node
    assert bundles_of(two_nodes) == [{"CPU": 8.0, "GPU": 4.0, "fast": 2.0}] * 2


def _cfg(pools: str, ranks: int) -> PipelineSpec:
    import yaml

    data = {
        "name": "t",
        "pools": yaml.safe_load(pools),
        "policy": {"spec": "builtin:smollm2-135m-instruct", "pool": "train"},
        "judges": [{"spec": "builtin:numeric-answer"}],
        "data": {"prompts": "builtin:arith-prompts"},
        "train": {"micro_batch_size": 1, "backend": {"ranks": ranks}},
    }
    return PipelineSpec.model_validate(data)


def test_missing_resources_name_each_pool_and_the_cluster():
    cfg = _cfg("{train: {gpus: 8, cpus: 32}, judge: {gpus: 2, cpus: 16}}", ranks=8)
    total = {"CPU": 2.0, "memory": 1e9, "node:10.0.0.1": 1.0}
    missing = missing_resources(cfg, total, ["train", "judge"])
    assert len(missing) == 2
    assert missing[0].startswith("pool 'train' needs 32 CPU, pool 'judge' needs 16 CPU: 48 CPU in all, the cluster has 2")
    assert "pool 'train' needs 8 GPU, pool 'judge' needs 2 GPU: 10 GPU in all, the cluster has 0" in missing[1]
    assert "cluster resources: CPU=2)" in missing[1]  # node: and memory entries left out
    assert missing_resources(cfg, {"CPU": 48.0, "GPU": 10.0}, ["train", "judge"]) == []
    assert missing_resources(cfg, {"CPU": 32.0, "GPU": 8.0}, ["train"]) == []  # unused pools do not count


def test_rollout_prompts_are_cut_into_contiguous_parts_and_gathered_in_order():
    prompts, keys = list("abcde"), [f"k{i}" for i in range(5)]
    parts = split_rollout(2, prompts, keys, 4, 7)
    assert [p[0] for p in parts] == [["a", "b"], ["c", "d", "e"]] and [p[1] for p in parts] == [["k0", "k1"], ["k2", "k3", "k4"]]
    assert all(p[2:] == (4, 7) for p in parts)  # same group size and seed on every rank
    assert [p[0] for p in split_rollout(3, ["a"], ["k"], 2, 0)] == [[], [], ["a"]]  # fewer prompts than ranks
    groups = gather_rollouts([([SimpleNamespace(key="k0"), SimpleNamespace(key="k1")], 2.0), ([SimpleNamespace(key="k2")], 3.5)])
    assert [g.key for g in groups[0]] == ["k0", "k1", "k2"] and groups[1] == 3.5


def test_prepare_shards_are_balanced_and_put_back_in_the_rollouts_order():
    import torch

    from grm.orchestrator.policy_group import gather_prepared, split_prepare
    from grm.orchestrator.types import Prepared
    from grm.sharding import balanced_partition
    from grm.training.batch import TrainBatch

    assert balanced_partition([5, 1, 9, 3, 7, 2, 8, 4], 2) == [[0, 1, 2, 7], [3, 4, 5, 6]]  # 19 vs 20 tokens
    rollouts = [
        SimpleNamespace(prompt_ids=[1] * p, token_ids=[2] * t, id=f"r{i}")
        for i, (p, t) in enumerate([(2, 1), (1, 3), (5, 2), (1, 1)])
    ]
    shards = split_prepare(2, rollouts)
    assert sorted(i for _, pos in shards for i in pos) == [0, 1, 2, 3] and all(len(pos) == 2 for _, pos in shards)

    def batch(rs):
        return TrainBatch.from_sequences(
            [r.prompt_ids for r in rs],
            [r.token_ids for r in rs],
            pad_id=0,
            ids=[r.id for r in rs],
            behaviour_logprobs=[[-float(len(r.token_ids))] * len(r.token_ids) for r in rs],
        )

    parts = [Prepared(batch(rs), 1.0 + k, pos) for k, (rs, pos) in enumerate(shards)]
    merged = gather_prepared(parts)
    whole = batch(rollouts)
    assert merged.batch.ids == whole.ids and merged.seconds == 2.0 and merged.positions is None
    merged = merged.batch
    for got, want in [(merged.input_ids, whole.input_ids), (merged.loss_mask, whole.loss_mask)]:
        assert torch.equal(got, want)
    assert torch.equal(merged["behaviour_logprobs"], whole["behaviour_logprobs"])


def test_judge_replicas_spread_over_the_nodes_of_their_pool():
    from grm.orchestrator.pools import Pool

    pool = Pool("j", PoolSpec(cpus=4, nodes=2), None, ["judge:a#0", "judge:a#1", "judge:a#2", "reference"])
    assert [pool.bundle_of(r) for r in pool.roles] == [0, 1, 0, 0]
    assert pool.peers("judge:a#1") == ["judge:a#1"] and pool.threads_of("judge:a#1") == 4  # a node to itself
    assert pool.threads_of("judge:a#0") == 2  # shares node 0 with replica 2 (the reference lives in its actor)
    assert pool.options.__doc__ and Pool("p", PoolSpec(cpus=2), None, ["policy"], ranks=2).bundle_of("policy#1") == 1
