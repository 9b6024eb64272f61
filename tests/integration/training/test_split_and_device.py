"""Checks on the tiny model (no checkpoint, no DeepSpeed): the loss of one optimizer step is
normalised over the whole batch, so the gradient does not depend on the micro-batch size; and every
tensor the trainers, the reference, the critic and the hf engine touch is on the module's device
(run with the model on ``meta``, where any CPU tensor meeting a model tensor fails)."""

from functools import partial

import pytest
import torch

from grm.algorithms import PPO, PolicyLoss
from grm.models.device import module_device, role_device
from grm.training.models import ReferenceModel, ValueModel, value_forward
from grm.training.torch_backend import TorchTrainer
from tests.integration.training.tiny import fixed_batch, grpo_loss, nll_loss, tiny_llama

pytestmark = pytest.mark.slow  # the tiny model only: ~10 s for the file


def _grads(module):
    return {n: p.grad.clone() for n, p in module.named_parameters() if p.grad is not None}


def _step_grads(make, micro_batch_size, batch, loss_fn, **kw):
    """Gradient and metrics of one step (no clipping: the raw whole-batch gradient)."""
    t = TorchTrainer(make(), lr=1e-3, micro_batch_size=micro_batch_size, max_grad_norm=1e9, **kw)
    metrics = t.step(batch, loss_fn)
    return _grads(t.module), metrics


def _batch():
    b = fixed_batch(n=7)  # rows of different lengths; 7 rows split 3 + 3 + 1 and 2 + 2 + 2 + 1
    g = torch.Generator().manual_seed(3)
    noise = 0.3 * torch.randn(b.loss_mask.shape, generator=g) * b.loss_mask
    ref = ReferenceModel(tiny_llama(seed=5)).logprobs(b)
    return b.with_fields(old_logprobs=ref + noise, ref_logprobs=ref, advantages=torch.linspace(-1.0, 1.0, len(b)))


LOSSES = {
    "nll": nll_loss,
    "grpo-token-mean": partial(grpo_loss, aggregation="token-mean"),
    "policy-seq-mean-token-mean+kl": PolicyLoss(aggregation="seq-mean-token-mean", kl_coef=0.3).loss_fn(stale=False),
    "policy-seq-mean-token-sum": PolicyLoss(aggregation="seq-mean-token-sum").loss_fn(stale=False),
}


@pytest.mark.parametrize("name", list(LOSSES))
def test_gradient_does_not_depend_on_micro_batch_size(name):
    batch, loss_fn = _batch(), LOSSES[name]
    whole, m_whole = _step_grads(tiny_llama, 7, batch, loss_fn)
    for size in (3, 2, 1):
        got, m = _step_grads(tiny_llama, size, batch, loss_fn)
        assert m["loss"] == pytest.approx(m_whole["loss"], rel=1e-5, abs=1e-6), (size, m, m_whole)
        worst = max(float((got[k] - whole[k]).abs().max()) for k in whole)
        assert worst < 1e-5 * max(float(v.abs().max()) for v in whole.values()), (size, worst)


def test_critic_gradient_does_not_depend_on_micro_batch_size():
    batch = _batch()
    batch = batch.with_fields(returns=batch.loss_mask * 0.7, old_values=torch.zeros_like(batch.loss_mask))
    batch = batch.with_fields(valid=torch.tensor([1.0, 1, 0, 1, 1, 1, 1]))

    def critic():
        base = tiny_llama()
        return ValueModel(base.model, base.config.hidden_size)

    loss_fn = PPO(value_clip=0.2).critic_loss_fn()
    whole, m_whole = _step_grads(critic, 7, batch, loss_fn, forward=value_forward)
    got, m = _step_grads(critic, 2, batch, loss_fn, forward=value_forward)
    assert m["loss"] == pytest.approx(m_whole["loss"], rel=1e-5)
    assert max(float((got[k] - whole[k]).abs().max()) for k in whole) < 1e-6


# ---------------------------------------------------------------------------------- placement
def _meta_only(module):
    """Every tensor any submodule receives must be on ``meta`` (a CPU tensor fails the test here,
    where ``meta`` would otherwise tolerate it, e.g. CPU ids into an embedding lookup)."""

    def check(mod, args, kwargs):
        for t in [*args, *kwargs.values()]:
            if isinstance(t, torch.Tensor) and not t.is_meta:
                raise AssertionError(f"{type(mod).__name__} received a tensor on {t.device}")

    for m in module.modules():
        m.register_forward_pre_hook(check, with_kwargs=True)
    return module


def _meta_loss(logprobs, mb, entropy):
    """Reads batch fields on the outputs' device; no host reads (a meta tensor has no values)."""
    from grm.algorithms import aggregate_loss

    per_tok = -(mb["advantages"][:, None] * (logprobs - mb["old_logprobs"]).exp())
    return aggregate_loss(per_tok, mb.loss_mask, "seq-mean-token-mean", **_counts(mb)) + 0 * entropy.sum(), {}


def _counts(mb):
    return {"tokens": mb.totals.tokens, "sequences": mb.totals.sequences}


def test_role_device_is_chosen_in_one_place():
    assert role_device(0) == torch.device("cpu")
    assert role_device(1) == (torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu"))
    assert role_device(1, override="meta") == torch.device("meta")
    assert module_device(tiny_llama().to("meta")) == torch.device("meta")


def test_trainer_reference_and_critic_run_on_the_module_device():
    meta = role_device(override="meta")
    batch = fixed_batch().with_fields(old_logprobs=torch.zeros(fixed_batch().loss_mask.shape))

    trainer = TorchTrainer(tiny_llama(attn="eager"), lr=1e-3, micro_batch_size=3, entropy=True, device=meta)
    _meta_only(trainer.module)
    assert all(p.is_meta for p in trainer.module.parameters())
    metrics = trainer.step(batch, _meta_loss)
    assert set(metrics) == {"loss", "grad_norm", "lr"}
    out = trainer.logprobs(batch)  # returned on the host, for the orchestrator
    assert out.device.type == "cpu" and out.shape == batch.loss_mask.shape
    assert all(v.device.type == "cpu" for v in trainer.state_dict().values())

    ref = ReferenceModel(tiny_llama(attn="eager"), micro_batch_size=5, device=meta)
    _meta_only(ref.module)
    assert ref.logprobs(batch).device.type == "cpu"

    base = tiny_llama(attn="eager")
    critic = TorchTrainer(
        ValueModel(base.model, base.config.hidden_size), lr=1e-3, micro_batch_size=4, forward=value_forward, device=meta
    )
    _meta_only(critic.module)
    b = batch.with_fields(returns=batch.loss_mask * 0.5, old_values=torch.zeros_like(batch.loss_mask))

    def critic_loss(values, mb, _):
        from grm.algorithms import aggregate_loss

        return 0.5 * aggregate_loss((values - mb["returns"]) ** 2, mb.loss_mask, "token-mean", tokens=mb.totals.tokens), {}

    critic.step(b, critic_loss)
    assert critic.logprobs(b).device.type == "cpu"


class _CharTokenizer:
    """Enough of a tokenizer for the hf engine on the tiny model: one id per character."""

    pad_token_id, eos_token_id = 0, 2

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [3 + ord(c) % 90 for c in text]}

    def decode(self, ids, skip_special_tokens=False):
        return "".join(chr(97 + i % 26) for i in ids)


def test_hf_engine_scores_and_generates_on_the_module_device():
    from grm.engines.base import GenerationRequest, SamplingParams
    from grm.engines.hf import HFEngine

    engine = HFEngine("tiny", model_obj=tiny_llama(attn="eager"), tokenizer=_CharTokenizer(), device=role_device(override="meta"))
    _meta_only(engine.model)
    assert engine.device == torch.device("meta")
    lps = engine.sequence_logprobs([[5, 6, 7], [5, 6]], [[8, 9], [10, 11, 12]])
    assert [len(x) for x in lps] == [2, 3]
    # the judge's path: prefill (a shared prefix, different lengths), first tokens, multi-token candidates
    reqs = [GenerationRequest(text="the shared judge instructions, then " + t) for t in ("a question", "another longer one")]
    scores = engine.score_continuations(reqs, [["1", "23"], ["456", ""]])
    assert [[s is None for s in row] for row in scores] == [[False, False], [False, True]]
    # greedy decoding (sampling would draw from a generator, which ``meta`` does not have)
    gens = engine.generate(reqs, SamplingParams(max_new_tokens=4, temperature=0.0, n=2))
    assert len(gens) == 4 and all(len(g.token_ids) == 4 and len(g.logprobs) == 4 for g in gens)
