"""Every algorithm function against values computed by hand (comments show the arithmetic)."""

import math

import pytest
import torch

from grm.algorithms import (
    aggregate_loss,
    entropy_from_logits,
    gae,
    grpo_advantages,
    kl_penalty,
    ppo_policy_loss,
    reinforce_pp_advantages,
    rloo_advantages,
    value_loss,
)

nan = float("nan")
T = torch.tensor


def close(a, b, tol=1e-5):
    assert torch.allclose(torch.as_tensor(a, dtype=torch.float64), torch.as_tensor(b, dtype=torch.float64), atol=tol), (a, b)


REWARDS = T([1.0, 0.0, 0.0, 1.0, 2.0, 2.0, 3.0, nan, 5.0])
GROUPS = T([0, 0, 0, 0, 1, 1, 2, 2, 2])


def test_grpo_nan_masking_and_zero_variance():
    # group 0: mean .5, unbiased std sqrt(1/3) -> +-.5/.57735 = +-.866025
    # group 1: std 0 -> 0; group 2: valid {3, 5}: mean 4, std sqrt(2) -> -+.707107, NaN -> 0
    s = 0.5 / math.sqrt(1 / 3)
    close(grpo_advantages(REWARDS, GROUPS), [s, -s, -s, s, 0, 0, -1 / math.sqrt(2), 0, 1 / math.sqrt(2)])
    # Dr. GRPO: no std division
    close(grpo_advantages(REWARDS, GROUPS, scale_by_std=False), [0.5, -0.5, -0.5, 0.5, 0, 0, -1, 0, 1])
    # a group with one valid member has no spread: 0; all-NaN group: 0
    close(grpo_advantages(T([nan, 4.0, nan, nan]), T([0, 0, 1, 1])), [0, 0, 0, 0])
    assert not torch.isnan(grpo_advantages(REWARDS, GROUPS)).any()


def test_rloo():
    # group 0: baseline_i = (2 - r_i) / 3 -> 1 - 1/3 = 2/3, 0 - 2/3; group 2: 3 - 5, 5 - 3
    close(rloo_advantages(REWARDS, GROUPS), [2 / 3, -2 / 3, -2 / 3, 2 / 3, 0, 0, -2, 0, 2])
    close(rloo_advantages(T([7.0, nan]), T([0, 0])), [0, 0])  # no valid peer


def test_reinforce_pp():
    # global whitening: valid [1, 2, 3]: mean 2, std 1
    close(reinforce_pp_advantages(T([1.0, 2.0, 3.0, nan])), [-1, 0, 1, 0])
    # group baseline first: g0 mean 2 -> [-1, 1]; g1 mean 10 -> [0]; whiten [-1, 1, 0]: std 1
    close(reinforce_pp_advantages(T([1.0, 3.0, 10.0, nan]), T([0, 0, 1, 1])), [-1, 1, 0, 0])


def test_gae_hand_computed():
    r, v, m = T([[0.0, 0.0, 1.0]]), T([[0.5, 0.6, 0.7]]), T([[1, 1, 1]])
    # lam .5: deltas .1, .1, .3 -> A2 = .3, A1 = .1 + .5*.3 = .25, A0 = .1 + .5*.25 = .225
    adv, ret = gae(r, v, m, gamma=1.0, lam=0.5)
    close(adv, [[0.225, 0.25, 0.3]])
    close(ret, [[0.725, 0.85, 1.0]])
    # lam 1: returns are the discounted Monte-Carlo returns .81, .9, 1
    _, ret = gae(r, v, m, gamma=0.9, lam=1.0)
    close(ret, [[0.81, 0.9, 1.0]])
    # prompt token and padding outside the mask are skipped: 0 there, and ignored by the recursion
    adv, ret = gae(T([[5.0, 0.0, 1.0, 5.0]]), T([[9.0, 0.5, 0.6, 9.0]]), T([[0, 1, 1, 0]]), gamma=1.0, lam=1.0)
    close(adv, [[0, 0.5, 0.4, 0]])
    close(ret, [[0, 1.0, 1.0, 0]])


def test_kl_estimators():
    lp, ref = T([[math.log(0.5)]]), T([[math.log(0.25)]])
    r = math.log(0.5)  # ref - logp
    close(kl_penalty(lp, ref, "k1"), [[-r]])
    close(kl_penalty(lp, ref, "k2"), [[0.5 * r * r]])
    close(kl_penalty(lp, ref, "k3"), [[math.exp(r) - r - 1]])
    close(kl_penalty(ref, ref, "k3"), [[0.0]])
    with pytest.raises(ValueError):
        kl_penalty(lp, ref, "k4")


def _ratios(*rs):
    old = torch.zeros(1, len(rs))
    return torch.log(T([list(rs)])), old


def test_ppo_clip_symmetric_and_clip_high():
    lp, old = _ratios(1.5, 0.5)
    m = torch.ones(1, 2)
    # A=+1: tok0 max(-1.5, -1.2) = -1.2 (clipped), tok1 max(-.5, -.8) = -.5 -> mean -.85
    loss, met = ppo_policy_loss(lp, old, T([1.0]), m)
    close(loss, -0.85)
    assert met["clip_frac"] == pytest.approx(0.5) and met["ratio_mean"] == pytest.approx(1.0)
    # clip-higher 0.28: tok0 -> -1.28 -> mean -.89
    loss, _ = ppo_policy_loss(lp, old, T([1.0]), m, clip_high=0.28)
    close(loss, -0.89)
    # A=-1: tok0 max(1.5, 1.2) = 1.5, tok1 max(.5, .8) = .8 -> 1.15; clip_low .1 -> tok1 .9 -> 1.2
    close(ppo_policy_loss(lp, old, T([-1.0]), m)[0], 1.15)
    close(ppo_policy_loss(lp, old, T([-1.0]), m, clip_low=0.1)[0], 1.2)


def test_ppo_dual_clip():
    lp, old = _ratios(4.0, 1.0)
    m = torch.ones(1, 2)
    # A=-1, ratio 4: max(4, 1.2) = 4, capped at 3; ratio 1: 1 (under the cap)
    loss, met = ppo_policy_loss(lp, old, T([-1.0]), m, dual_clip=3.0)
    close(loss, (3.0 + 1.0) / 2)
    assert met["dual_clip_frac"] == pytest.approx(0.5)
    # positive advantages are never dual-clipped: A=+1, ratio 4 -> -1.2, ratio 1 -> -1
    close(ppo_policy_loss(lp, old, T([1.0]), m, dual_clip=3.0)[0], -1.1)
    with pytest.raises(ValueError):
        ppo_policy_loss(lp, old, T([1.0]), m, dual_clip=0.5)


def test_ppo_aggregation_modes():
    # ratio 1 everywhere, so the per-token loss is -A: seq0 [1, 2, (pad)], seq1 [4, (pad), (pad)]
    adv = -T([[1.0, 2.0, 9.0], [4.0, 9.0, 9.0]])
    lp = torch.zeros(2, 3)
    m = T([[1, 1, 0], [1, 0, 0]])
    close(ppo_policy_loss(lp, lp, adv, m, aggregation="token-mean")[0], 7 / 3)
    close(ppo_policy_loss(lp, lp, adv, m, aggregation="seq-mean-token-mean")[0], (1.5 + 4) / 2)
    close(ppo_policy_loss(lp, lp, adv, m, aggregation="seq-mean-token-sum")[0], (3 + 4) / 2)
    # an empty sequence does not drag the mean down
    close(aggregate_loss(T([[1.0, 1.0], [5.0, 5.0]]), T([[1, 1], [0, 0]]), "seq-mean-token-mean"), 1.0)


def test_aggregation_over_whole_batch_counts():
    # a micro-batch of a batch with 10 response tokens in 4 sequences (3 with tokens):
    # per-token loss [1, 2, (pad)] and [4, (pad), (pad)]
    loss, m = T([[1.0, 2.0, 9.0], [4.0, 9.0, 9.0]]), T([[1, 1, 0], [1, 0, 0]])
    # token-mean share: (1 + 2 + 4) / 10
    close(aggregate_loss(loss, m, "token-mean", tokens=10, sequences=3), 0.7)
    # seq-mean-token-mean share: (3/2 + 4/1) / 3 sequences
    close(aggregate_loss(loss, m, "seq-mean-token-mean", tokens=10, sequences=3), 5.5 / 3)
    # seq-mean-token-sum share: (3 + 4) / 3
    close(aggregate_loss(loss, m, "seq-mean-token-sum", tokens=10, sequences=3), 7 / 3)
    # empty batch: the denominators never go below 1
    close(aggregate_loss(loss, torch.zeros(2, 3), "token-mean", tokens=0, sequences=0), 0.0)
    # shares of two micro-batches add up to the aggregation over their union
    whole, wm = T([[1.0, 2.0, 9.0], [4.0, 9.0, 9.0], [3.0, 3.0, 3.0]]), T([[1, 1, 0], [1, 0, 0], [1, 1, 1]])
    for agg in ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum"):
        counts = {"tokens": 6, "sequences": 3}
        parts = aggregate_loss(whole[:1], wm[:1], agg, **counts) + aggregate_loss(whole[1:], wm[1:], agg, **counts)
        close(parts, aggregate_loss(whole, wm, agg))
    # through the PPO loss (ratio 1: per-token loss -A) and the value loss (0.5 * err^2, token share)
    lp = torch.zeros(2, 3)
    close(ppo_policy_loss(lp, lp, -loss, m, aggregation="token-mean", tokens=10, sequences=3)[0], 0.7)
    close(value_loss(T([[1.0, 3.0]]), T([[0.0, 0.0]]), T([[0.0, 0.0]]), T([[1, 1]]), clip=None, tokens=4)[0], 0.5 * 10 / 4)


def test_loss_objects_read_the_trainers_counts():
    from grm.algorithms import PPO, PolicyLoss
    from grm.algorithms.algorithm import whole_batch_counts

    class Totals:
        tokens, sequences = 8.0, 4.0

    class MB:
        loss_mask = T([[1.0, 1.0], [1.0, 0.0]])
        fields = {
            "advantages": T([1.0, -2.0]),
            "ref_logprobs": torch.zeros(2, 2),
            "old_values": torch.zeros(2, 2),
            "returns": T([[1.0, 1.0], [2.0, 0.0]]),
        }
        totals = Totals()

        def __getitem__(self, k):
            return self.fields[k]

    assert whole_batch_counts(MB()) == {"tokens": 8.0, "sequences": 4.0}
    assert whole_batch_counts(object()) == {}
    # ratio 1, per-token loss -A: -1, -1, +2 -> token share 0 / 8; seq-mean-token-sum (-2 + 2) / 4
    lp = torch.zeros(2, 2)
    close(PolicyLoss(aggregation="token-mean").loss_fn(False)(lp, MB(), None)[0], 0.0)
    # seq-mean-token-mean: (-1 + 2) / 4 sequences
    close(PolicyLoss(aggregation="seq-mean-token-mean").loss_fn(False)(lp, MB(), None)[0], 0.25)
    # KL in the loss (k1 = logp - ref = 1 on the 3 tokens): 0.5 x 3 / 8 on top of the policy share;
    # the reported kl is this micro-batch's mean (1)
    value, metrics = PolicyLoss(kl_coef=0.5, kl_estimator="k1").loss_fn(False)(torch.ones(2, 2), MB(), None)
    close(value, 0.0 + 0.5 * 3 / 8)
    assert metrics["kl"] == pytest.approx(1.0)
    # critic: 0.5 x (1 + 1 + 4) / 8 whole-batch tokens
    close(PPO(value_clip=None).critic_loss_fn()(torch.zeros(2, 2), MB(), None)[0], 0.5 * 6 / 8)


def test_ppo_tis_cap():
    lp = torch.zeros(1, 2)
    old = torch.zeros(1, 2)
    behaviour = torch.log(T([[1 / 3, 2.0]]))  # exp(old - behaviour) = 3, 0.5
    loss, met = ppo_policy_loss(lp, old, T([1.0]), torch.ones(1, 2), behaviour_logprobs=behaviour, tis_cap=2.0)
    # weights min(3, 2) = 2 and 0.5 on per-token losses -1, -1 -> mean -1.25
    close(loss, -1.25)
    assert met["tis_weight_mean"] == pytest.approx(1.25)
    assert met["tis_capped_frac"] == pytest.approx(0.5)  # the first token's 3 was cut to 2
    # a masked token does not count: only the second (0.5, under the cap) remains
    met = ppo_policy_loss(lp, old, T([1.0]), T([[0.0, 1.0]]), behaviour_logprobs=behaviour, tis_cap=2.0)[1]
    assert met["tis_weight_mean"] == pytest.approx(0.5) and met["tis_capped_frac"] == 0.0
    # without the cap argument TIS is off: weight 1, nothing capped
    loss, met = ppo_policy_loss(lp, old, T([1.0]), torch.ones(1, 2), behaviour_logprobs=behaviour)
    close(loss, -1.0)
    assert met["tis_weight_mean"] == 1.0 and met["tis_capped_frac"] == 0.0


def test_ppo_gradient_flows_only_through_logprobs():
    lp = torch.log(T([[1.1, 0.9]])).requires_grad_()
    loss, _ = ppo_policy_loss(lp, torch.zeros(1, 2), T([1.0]), torch.ones(1, 2))
    loss.backward()
    # d/dlp of -A*ratio/2 = -ratio/2 for unclipped tokens (both inside [.8, 1.2])
    close(lp.grad, [[-0.55, -0.45]])


def test_value_loss():
    # v 1.0, old .5: v_clip .7; err 1, err_clip 1.69 -> .5 * 1.69
    loss, met = value_loss(T([[1.0]]), T([[0.5]]), T([[2.0]]), T([[1]]))
    close(loss, 0.845)
    assert met["vf_clip_frac"] == 1.0
    loss, met = value_loss(T([[0.6]]), T([[0.5]]), T([[2.0]]), T([[1]]))
    close(loss, 0.98)
    assert met["vf_clip_frac"] == 0.0
    close(value_loss(T([[1.0, 7.0]]), T([[0.5, 0.0]]), T([[2.0, 0.0]]), T([[1, 0]]), clip=None)[0], 0.5)


def test_entropy_from_logits():
    close(entropy_from_logits(torch.zeros(1, 2, 4), T([[1, 0]])), math.log(4))
    peaked = T([[[100.0, 0.0, 0.0, 0.0]]])
    close(entropy_from_logits(peaked, T([[1]])), 0.0)
