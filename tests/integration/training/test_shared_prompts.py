"""Shared-prompt forward (``train.share_prompts``): each distinct prompt runs once and a group's
samples go on from its keys/values; the numbers must be a full forward's, gradients included."""

import pytest
import torch

from grm.models.weights import token_logprobs
from grm.training import TrainBatch
from grm.training.batch import first_target
from grm.training.core import policy_forward
from grm.training.deepspeed_backend import DeepSpeedTrainer
from grm.training.models import ReferenceModel
from grm.training.torch_backend import TorchTrainer
from tests.integration.training.tiny import nll_loss, tiny_llama

pytestmark = pytest.mark.slow


def grouped_batch(vocab: int = 96, seed: int = 3) -> TrainBatch:
    """Three prompts of different lengths, 3 samples each of different lengths (two of a single
    token), plus a prompt that differs from the first only in its last token (same head, other
    tail) and two samples of a 2-token prompt (a 1-token head)."""
    g = torch.Generator().manual_seed(seed)

    def toks(n: int) -> list[int]:
        return torch.randint(3, vocab, (n,), generator=g).tolist()

    p1, p2, p3 = toks(6), toks(9), toks(4)
    p4 = [*p1[:-1], (p1[-1] + 1) % vocab or 3]
    p5 = toks(2)
    prompts = [p1] * 3 + [p2] * 3 + [p3] * 3 + [p4, p5, p5]
    comps = [toks(n) for n in (5, 1, 8, 3, 7, 2, 6, 6, 4, 5, 3, 1)]
    adv = torch.linspace(-1, 1, len(prompts))
    batch = TrainBatch.from_sequences(prompts, comps, pad_id=0, advantages=adv)
    return batch.with_fields(prompt_len=torch.tensor([len(p) for p in prompts]))


def without_prompt_len(batch: TrainBatch) -> TrainBatch:
    from dataclasses import replace

    return replace(batch, fields={k: v for k, v in batch.fields.items() if k != "prompt_len"})


def test_shared_prompt_logprobs_entropy_and_gradients_match_a_full_forward():
    model = tiny_llama()
    batch = grouped_batch()
    mask = batch.loss_mask

    def run(b: TrainBatch) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        model.zero_grad()
        lp, ent = policy_forward(model, b, True)
        (-(lp * mask).sum()).backward()
        return lp.detach() * mask, ent * mask, {n: p.grad.clone() for n, p in model.named_parameters()}

    lp_s, ent_s, g_s = run(batch)
    lp_f, ent_f, g_f = run(without_prompt_len(batch))
    assert torch.allclose(lp_s, lp_f, atol=1e-5), (lp_s - lp_f).abs().max()
    assert torch.allclose(ent_s, ent_f, atol=1e-5), (ent_s - ent_f).abs().max()
    assert (lp_s != 0).sum() == mask.sum()  # every response token read, nothing outside the mask
    for n in g_f:
        assert torch.allclose(g_s[n], g_f[n], rtol=1e-4, atol=1e-6), (n, (g_s[n] - g_f[n]).abs().max())
    # one call over one packed row: each distinct prompt head once (p1 and p4 share theirs), then
    # every row from its prompt's last token on; no padding, one embedding lookup
    calls, shapes = [], []
    hook = model.model.embed_tokens.register_forward_hook(lambda m, i, o: calls.append(tuple(i[0].shape)))
    layer = model.model.layers[0].register_forward_hook(lambda m, i, o: shapes.append(tuple(i[0].shape[:2])))
    with torch.no_grad():
        policy_forward(model, batch, False)
    hook.remove()
    layer.remove()
    heads = {tuple(r[: int(p) - 1]) for r, p in zip(batch.input_ids.tolist(), batch["prompt_len"], strict=True)}
    assert len(heads) == 4  # p1 (shared with p4), p2, p3, p5
    tails = sum(int(t) - int(p) + 1 for t, p in zip(batch.attention_mask.sum(-1), batch["prompt_len"], strict=True))
    packed = sum(len(h) for h in heads) + tails
    assert packed < int(batch.attention_mask.sum())  # fewer positions than the rows' real tokens
    assert shapes == [(1, packed)], shapes
    assert calls == [(1, packed)], calls


def naive_logprobs(model, batch: TrainBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """Every position's logits, log-softmax, the targets' values: the textbook computation."""
    logp = torch.log_softmax(model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits[:, :-1], -1)
    return logp.gather(-1, batch.input_ids[:, 1:, None])[..., 0], -(logp.exp() * logp).sum(-1)


@pytest.mark.parametrize("shared", [False, True])
def test_the_lm_head_runs_only_at_real_targets(shared):
    """The LM head and the vocab-wide log-softmax run at the positions whose target is a real
    token, never at padding (a ragged batch is half padding): values, entropy and gradients equal
    the textbook computation over every position, and a model whose head the hook cannot reach
    falls back to picking from the full logits."""
    model = tiny_llama()
    batch = grouped_batch()
    if not shared:
        batch = without_prompt_len(batch)
    mask = batch.loss_mask
    model.zero_grad()
    want_lp, want_ent = naive_logprobs(model, batch)
    (-(want_lp * mask).sum()).backward()
    want_g = {n: p.grad.clone() for n, p in model.named_parameters()}

    seen = []
    hook = model.lm_head.register_forward_hook(lambda m, i, o: seen.append(tuple(i[0].shape)))
    model.zero_grad()
    lp, ent = policy_forward(model, batch, True)
    (-(lp * mask).sum()).backward()
    hook.remove()
    assert torch.allclose(lp * mask, want_lp.detach() * mask, atol=1e-5), (lp * mask - want_lp * mask).abs().max()
    assert torch.allclose(ent * mask, want_ent.detach() * mask, atol=1e-5)
    for n, g in want_g.items():
        assert torch.allclose(model.get_parameter(n).grad, g, rtol=1e-4, atol=1e-6), n
    # one row of hidden states per real target: the responses' tokens (shared), or every real
    # token from the first response column on (whole rows); none at padding
    start = first_target(mask)
    real = int(mask.sum()) if shared else int(batch.attention_mask[:, start + 1 :].sum())
    assert [s for s in seen if len(s) == 2] == [(real, 32)], seen
    assert (lp != 0).sum() == real  # nothing placed where nothing was computed
    model.get_output_embeddings = lambda: None  # the hook cannot be placed: the full logits are picked from
    fallback, _ = policy_forward(model, batch, False)
    assert torch.allclose(fallback, lp.detach(), atol=1e-6)


def test_one_token_prompts_and_empty_responses_match_a_full_forward():
    """A 1-token prompt has no head to share (its row sees only itself), with no head at all the
    packed row is the tails alone, and a row may end at its prompt."""
    model = tiny_llama()
    prompts, comps = [[5], [5], [7, 8, 9], [7, 8, 9]], [[10, 11, 12], [13], [14, 15], [16]]
    batch = TrainBatch.from_sequences(prompts, comps, pad_id=0)
    lens = torch.tensor([len(p) for p in prompts])
    for rows in (slice(None), slice(0, 2)):
        b = batch.select(rows)
        full = token_logprobs(model, b.input_ids, b.attention_mask)[0] * b.loss_mask
        shared = token_logprobs(model, b.input_ids, b.attention_mask, prompt_lens=lens[rows])[0] * b.loss_mask
        assert torch.allclose(shared, full, atol=1e-5), (rows, (shared - full).abs().max())
    ends = batch.select(slice(2, 4))
    attn = ends.attention_mask.clone()
    attn[1, 3] = 0  # the second row ends with its prompt
    ended = token_logprobs(model, ends.input_ids, attn, prompt_lens=torch.tensor([3, 3]))[0]
    full = token_logprobs(model, ends.input_ids, attn)[0]
    assert ended.shape == full.shape and torch.allclose(ended[0, 2:4], full[0, 2:4], atol=1e-5)
    with pytest.raises(ValueError, match="do not fit"):
        token_logprobs(model, ends.input_ids, ends.attention_mask, prompt_lens=torch.tensor([9, 3]))


@pytest.mark.parametrize("stage", [None, 3])
def test_training_steps_with_shared_prompts_match_full_rows(stage):
    """Three optimizer steps (torch backend, and DeepSpeed ZeRO-3, which gathers parameters in
    every forward call) give the same losses and weights with and without sharing."""

    def trainer():
        if stage is None:
            return TorchTrainer(tiny_llama(), micro_batch_size=4, lr=1e-2)
        return DeepSpeedTrainer(tiny_llama(), micro_batch_size=4, global_batch_size=12, zero_stage=stage, lr=1e-2)

    batch = grouped_batch()
    a, b = trainer(), trainer()
    start = {k: v.clone() for k, v in a.state_dict().items()}
    ma = [a.step(batch, nll_loss) for _ in range(3)]
    mb = [b.step(without_prompt_len(batch), nll_loss) for _ in range(3)]
    # DeepSpeed reduces in its own order: its first gradient norm is 5e-4 relative from the torch
    # backend's on this batch with or without sharing (test_zero_stages_match_torch_backend), and
    # Adam at lr 1e-2 carries that into later steps (ZeRO-3's step-3 loss without sharing is 8.6e-4
    # from the torch backend's; with and without sharing 7.4e-4 apart, the torch backend's 1e-7)
    tol = 1e-5 if stage is None else 2e-3
    assert [m["loss"] for m in ma] == pytest.approx([m["loss"] for m in mb], rel=tol)
    assert ma[0]["grad_norm"] == pytest.approx(mb[0]["grad_norm"], rel=tol if stage is None else 1e-3)
    assert ma[-1]["loss"] < ma[0]["loss"]
    # weights: Adam turns rounding noise in near-zero gradients into steps of up to lr, so in L2
    # beside how far training moved them (max abs: torch 1e-5; ZeRO-3 up to 2.5e-2 on a few entries)
    wa, wb = a.state_dict(), b.state_dict()
    moved = sum(float((wa[k] - start[k]).pow(2).sum()) for k in wa) ** 0.5
    apart = sum(float((wa[k] - wb[k]).pow(2).sum()) for k in wa) ** 0.5
    assert apart < (1e-4 if stage is None else 0.05) * moved, (apart, moved)


def test_reference_on_smollm2_with_shared_prompts(smollm2_fp32):
    """The reference pass on the real model (GQA, RoPE) with a chat-templated group of samples."""
    tok = smollm2_fp32.tokenizer
    chat = [[{"role": "user", "content": q}] for q in ("2+2?", "What is 17*3?")]
    prompts = [
        tok.encode(tok.apply_chat_template(c, tokenize=False, add_generation_prompt=True), add_special_tokens=False) for c in chat
    ]
    answers = ["4", "The answer is 4.", "Four, since 2+2=4.", "51", "17*3 = 51"]
    rows = [prompts[0]] * 3 + [prompts[1]] * 2
    batch = TrainBatch.from_sequences(rows, [tok.encode(a, add_special_tokens=False) for a in answers], pad_id=0)
    ref = ReferenceModel(smollm2_fp32.model, micro_batch_size=8)
    full = ref.logprobs(batch)
    shared = ref.logprobs(batch.with_fields(prompt_len=torch.tensor([len(p) for p in rows])))
    assert torch.allclose(shared, full, atol=1e-4), (shared - full).abs().max()
    assert (full != 0).sum() == batch.loss_mask.sum()


def test_eager_attention_gets_an_additive_packed_mask():
    """Eager attention adds its mask to the scores (SDPA takes the boolean one): the packed row's
    mask is then 0 where a token sees and the dtype's minimum elsewhere, with the same values."""
    model = tiny_llama(attn="eager")
    batch = grouped_batch()
    shared, _ = token_logprobs(model, batch.input_ids, batch.attention_mask, prompt_lens=batch["prompt_len"])
    full, _ = token_logprobs(model, batch.input_ids, batch.attention_mask)
    mask = batch.loss_mask
    assert torch.allclose(shared * mask, full * mask, atol=1e-5), (shared * mask - full * mask).abs().max()
