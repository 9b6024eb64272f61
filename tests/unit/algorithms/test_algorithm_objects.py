"""The Algorithm objects: registry, what they need before training, advantages, critic masking."""

import math

import pytest
import torch

from grm.algorithms import ALGORITHMS, PPO, PolicyLoss, build_algorithm, sequence_reward_on_last_token, whiten
from grm.config.paths import BUILTIN_DATA_SETS
from grm.data.builtin import SETS

nan = float("nan")


def test_registry_builds_each_type():
    kinds = {t: (type(a).__name__, getattr(a, "estimator", None)) for t in ALGORITHMS for a in [build_algorithm(t)]}
    assert kinds == {
        "grpo": ("SequenceLevel", "grpo"),
        "dr_grpo": ("SequenceLevel", "dr_grpo"),
        "rloo": ("SequenceLevel", "rloo"),
        "reinforce_pp": ("SequenceLevel", "reinforce_pp"),
        "ppo": ("PPO", None),
    }
    assert build_algorithm("ppo").needs_critic and not build_algorithm("grpo").needs_critic
    with pytest.raises(ValueError, match="unknown algorithm 'a2c'"):
        build_algorithm("a2c")


def test_old_logprobs_needed_for_several_steps_or_kl_in_reward():
    assert not build_algorithm("grpo").needs_old_logprobs
    assert build_algorithm("grpo", epochs=2).needs_old_logprobs
    assert build_algorithm("rloo", mini_batches=2).needs_old_logprobs
    assert build_algorithm("ppo", loss=PolicyLoss(kl_coef=0.1, kl_in_reward=True)).needs_old_logprobs
    assert not build_algorithm("ppo", loss=PolicyLoss(kl_coef=0.1, kl_in_reward=False)).needs_old_logprobs
    assert build_algorithm("grpo", epochs=2, mini_batches=3).steps_per_batch == 6


def test_grpo_and_dr_grpo_advantages_and_kl_in_reward():
    r, g, m = torch.tensor([1.0, 0.0, nan, 1.0]), torch.tensor([0, 0, 1, 1]), torch.ones(4, 2)
    # group 0: mean .5, std .7071 -> +-.7071; group 1 has one valid member -> 0
    out = build_algorithm("grpo").advantages(r, g, m, None, None)
    assert torch.allclose(out.advantages, torch.tensor([0.7071, -0.7071, 0.0, 0.0]), atol=1e-4)
    assert out.stats["zero_advantage_frac"] == 0.5
    assert torch.allclose(build_algorithm("dr_grpo").advantages(r, g, m, None, None).advantages, torch.tensor([0.5, -0.5, 0, 0]))
    # KL folded into the reward: sample 0 loses 0.5 x (0.2 + 0.2) = 0.2 -> rewards .8, 0 -> +-.4 (Dr. GRPO)
    kl = torch.tensor([[0.2, 0.2], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0]])
    a = build_algorithm("dr_grpo", loss=PolicyLoss(kl_coef=0.5, kl_in_reward=True)).advantages(r, g, m, kl, None)
    assert torch.allclose(a.advantages, torch.tensor([0.4, -0.4, 0, 0]))
    assert a.stats["kl"] == pytest.approx((0.2 + 0 + 0 + 0) / 4)


def test_ppo_puts_the_reward_on_the_last_token_and_masks_failed_samples():
    mask = torch.tensor([[0.0, 1.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0]])
    assert sequence_reward_on_last_token(torch.tensor([2.0, 3.0]), mask).tolist() == [[0, 0, 2, 0], [0, 0, 0, 3]]
    values = torch.zeros(2, 4)
    out = PPO(gamma=1.0, lam=1.0).advantages(torch.tensor([1.0, nan]), torch.tensor([0, 1]), mask, None, values)
    assert (out.advantages[1] == 0).all() and (out.returns[1] == 0).all()  # the masked sample has no target
    assert out.returns[0].tolist() == [0.0, 1.0, 1.0, 0.0]


def test_ppo_critic_loss_leaves_masked_samples_out():
    loss_fn = PPO(value_clip=None).critic_loss_fn()

    class MB:
        loss_mask = torch.ones(2, 2)
        fields = {
            "old_values": torch.zeros(2, 2),
            "returns": torch.tensor([[1.0, 1.0], [0.0, 0.0]]),
            "valid": torch.tensor([1.0, 0.0]),
        }

        def __getitem__(self, k):
            return self.fields[k]

    values = torch.tensor([[1.0, 1.0], [5.0, 5.0]])
    # only row 0 counts, where values == returns: loss 0; with row 1 valid: 0.5 x (25 + 25) / 4 = 6.25
    loss, _ = loss_fn(values, MB(), None)
    assert float(loss) == 0.0
    MB.fields = {**MB.fields, "valid": torch.tensor([1.0, 1.0])}
    assert float(loss_fn(values, MB(), None)[0]) == pytest.approx(6.25)


def test_whiten_over_mask_only():
    x = torch.tensor([[1.0, 3.0, 100.0]])
    w = whiten(x, torch.tensor([[1.0, 1.0, 0.0]]))
    assert w[0, 2] == 0 and math.isclose(float(w[0, 0]), -0.7071, abs_tol=1e-3)


def test_dual_clip_reaches_the_loss():
    loss = PolicyLoss(dual_clip=3.0).loss_fn(stale=False)

    class MB:
        loss_mask = torch.ones(1, 1)
        fields = {"old_logprobs": torch.zeros(1, 1), "advantages": torch.tensor([-1.0])}

        def __getitem__(self, k):
            return self.fields[k]

    # ratio e^2 = 7.39 on a negative advantage: unclipped loss 7.39, dual clip caps it at 3
    value, m = loss(torch.full((1, 1), 2.0), MB(), None)
    assert float(value) == pytest.approx(3.0) and m["dual_clip_frac"] == 1.0


def test_builtin_data_set_names_match_the_config_list():
    assert set(SETS) == set(BUILTIN_DATA_SETS)
