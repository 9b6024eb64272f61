"""Requests that carry exact prompt token ids: exactly one prompt form per request, and the hf
engine samples from those ids as given (no re-tokenisation), on a tiny random model."""

import pytest
import torch

from grm.engines.base import GenerationRequest, SamplingParams, render_prompt


class Tok:
    """Stands in for a tokenizer: one id per character; ids >= 100 are no character at all."""

    pad_token_id = 0
    eos_token_id = 1

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [ord(c) % 100 for c in text]}

    def decode(self, ids, skip_special_tokens=False):
        return "".join(chr(65 + i % 26) for i in ids)

    def apply_chat_template(self, messages, tokenize=False, **kw):
        return "".join(m["content"] for m in messages)


@pytest.mark.parametrize(
    "kw",
    [{}, {"messages": [], "text": "x"}, {"text": "x", "token_ids": [1]}, {"messages": [], "token_ids": [1]}],
)
def test_a_request_needs_exactly_one_prompt_form(kw):
    with pytest.raises(ValueError, match="exactly one of messages=, text= or token_ids="):
        GenerationRequest(**kw)


def test_token_ids_do_not_continue_a_message_and_render_as_their_decoding():
    with pytest.raises(ValueError, match="continue_final"):
        GenerationRequest(token_ids=[1, 2], continue_final=True)
    assert render_prompt(Tok(), GenerationRequest(token_ids=[0, 1, 2])) == "ABC"


@pytest.fixture(scope="module")
def engine():
    from transformers import LlamaConfig, LlamaForCausalLM

    from grm.engines.hf import HFEngine

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=160, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=256, eos_token_id=1, pad_token_id=0,
    )  # fmt: skip
    return HFEngine("tiny", model_obj=LlamaForCausalLM(cfg).eval(), tokenizer=Tok())


def test_hf_engine_samples_from_the_ids_as_given_and_its_logprobs_are_the_teacher_forced_ones(engine):
    ids = [150, 151, 7, 152, 9, 120]  # ids >= 100 never come out of Tok: re-encoding would change them
    assert engine.encode(GenerationRequest(token_ids=ids)) == ids
    sp = SamplingParams(max_new_tokens=6, seed=3)
    gens = engine.generate([GenerationRequest(token_ids=ids), GenerationRequest(token_ids=ids[:3])], sp)
    assert [g.prompt_tokens for g in gens] == [6, 3]
    again = engine.generate([GenerationRequest(token_ids=ids)], sp)[0]
    assert again.token_ids == gens[0].token_ids  # the same ids and seed: the same sample, whatever the batch
    recomputed = engine.sequence_logprobs([ids], [gens[0].token_ids])[0]
    assert max(abs(a - b) for a, b in zip(recomputed, gens[0].logprobs, strict=True)) < 1e-5
