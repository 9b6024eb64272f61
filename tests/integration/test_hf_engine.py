"""The hf engine on the real SmolLM2-135M-Instruct."""

import pytest
import torch

from grm.engines.base import GenerationAborted, SamplingParams
from grm.engines.base import GenerationRequest as Req
from grm.engines.kvcache import _common_prefix, prefill

pytestmark = pytest.mark.slow

GREEDY = SamplingParams(temperature=0.0, max_new_tokens=24)


def _chat(text):
    return Req(messages=[{"role": "user", "content": text}])


def test_generation_structure(smollm2_fp32):
    gens = smollm2_fp32.generate([_chat("Say hello."), _chat("Count to three.")], SamplingParams(n=2, max_new_tokens=12, seed=1))
    assert len(gens) == 4
    assert [(g.request_index, g.sample_index) for g in gens] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    for g in gens:
        assert g.text.strip() and len(g.token_ids) == len(g.logprobs) <= 12
        assert g.finish_reason in ("stop", "length") and g.version == 0 and g.prompt_tokens > 0
        assert all(lp <= 0 for lp in g.logprobs)


def test_greedy_batch_of_32_equals_single(smollm2_fp32):
    prompts = [_chat(f"Write one sentence about the number {i}.") for i in range(31)] + [_chat("What is the capital of France?")]
    batch = smollm2_fp32.generate(prompts, GREEDY)
    for k in (0, 7, 31):
        alone = smollm2_fp32.generate([prompts[k]], GREEDY)[0]
        assert alone.token_ids == batch[k].token_ids, k
        assert alone.text == batch[k].text


def test_mixed_lengths_grouped_prefill_equals_single(smollm2_fp32):
    """Prompts of 20 to ~600 tokens: prefilled in length groups into one slab cache, rows ending at
    different steps (one stops on a stop string) and compacted lazily, must match single runs; so
    must continuation scores."""
    essay = " ".join(f"Fact {i}: the river is {i} km long." for i in range(60))
    prompts = [
        _chat("Hi."),
        _chat(essay + " Summarise."),
        _chat("Name a colour."),
        _chat(essay[:900] + " Which fact is first?"),
        _chat(essay[:300]),
        _chat("Count to five."),
    ]
    sp = SamplingParams(temperature=0.0, max_new_tokens=20, stop=["3"])
    eng = smollm2_fp32
    lens = [len(eng.encode(p)) for p in prompts]
    assert max(lens) > 10 * min(lens)
    old = eng.max_batch_tokens
    try:
        eng.max_batch_tokens = 100_000
        batch = eng.generate(prompts, sp)
        cands = [["A", " B", " the river"]] * len(prompts)
        scores = eng.score_continuations(prompts, cands)
    finally:
        eng.max_batch_tokens = old
    assert len({len(g.token_ids) for g in batch}) > 1  # rows really finished at different steps
    for k, p in enumerate(prompts):
        alone = eng.generate([p], sp)[0]
        assert alone.token_ids == batch[k].token_ids and alone.text == batch[k].text, k
        assert alone.logprobs == pytest.approx(batch[k].logprobs, abs=1e-3)
        assert eng.score_continuations([p], [cands[k]])[0] == pytest.approx(scores[k], abs=1e-3)


def test_prefixes_some_prompts_share_run_once_and_change_nothing(smollm2_fp32):
    """A judge batch: two questions, three responses each, under one header. Each question's
    prefix runs once for its three rows (every position beyond those shared runs once), the last
    logits equal a prefill that shares nothing, and every generated row equals its single run."""
    eng = smollm2_fp32
    head = "You grade answers to questions. Read the question and the answer. Then write a short critique."
    head += " Is the answer right? Is it complete?\n"
    questions = [" ".join(f"Step {i}: add {i} apples to the basket." for i in range(k, k + 8)) for k in (1, 30)]
    prompts = [
        Req(text=f"{head}[Question] {q}\n[Answer] {a}\nCritique:")
        for q in questions
        for a in ("Nine apples.", "There are forty-five apples in all.", "I do not know.")
    ]
    ids = [eng.encode(p) for p in prompts]
    header = _common_prefix(ids)
    shared = [_common_prefix(ids[k : k + 3]) - header for k in (0, 3)]  # each question's own shared part
    assert header >= 32 and min(shared) > 60  # long enough to be kept (PromptCache.min_reuse) and to show
    seen = []
    hook = eng.model.get_input_embeddings().register_forward_hook(lambda m, a, out: seen.append(a[0].numel()))
    try:
        _, logits, _ = prefill(eng.model, ids, eng.pad_id, extra=0)
    finally:
        hook.remove()
    assert sum(seen) == sum(len(i) for i in ids) - 5 * header - 2 * sum(shared)
    _, plain, _ = prefill(eng.model, ids, eng.pad_id, extra=0, min_fill=0.5)  # no sharing at all
    assert torch.allclose(logits, plain, atol=1e-3)
    batch = eng.generate(prompts, GREEDY.replace(max_new_tokens=8))
    for k in (0, 4):
        alone = eng.generate([prompts[k]], GREEDY.replace(max_new_tokens=8))[0]
        assert alone.token_ids == batch[k].token_ids, k


def test_stop_strings_cut_text(smollm2_fp32):
    req = Req(text="Count: 1, 2, 3, 4, 5,")
    free = smollm2_fp32.generate([req], SamplingParams(temperature=0, max_new_tokens=16))[0]
    assert "7" in free.text
    stopped = smollm2_fp32.generate([req], SamplingParams(temperature=0, max_new_tokens=16, stop=("7",)))[0]
    assert stopped.finish_reason == "stop" and "7" not in stopped.text
    assert free.text.startswith(stopped.text) and len(stopped.token_ids) < len(free.token_ids)


def test_stop_when_ends_a_row_once_it_holds(smollm2_fp32):
    """``stop_when`` (a judge's ``sampling.stop_at_score``): the row ends after the token that makes
    it true, the text kept whole; rows it never holds for run on."""
    req = Req(text="Count: 1, 2, 3, 4, 5,")
    free = smollm2_fp32.generate([req], SamplingParams(temperature=0, max_new_tokens=16))[0]
    assert "7" in free.text
    sp = SamplingParams(temperature=0, max_new_tokens=16, stop_when=lambda text: "7" in text[:-2])
    stopped, other = smollm2_fp32.generate([req, Req(text="The capital of France is")], sp)
    assert stopped.finish_reason == "stop" and len(stopped.token_ids) < len(free.token_ids)
    assert free.text.startswith(stopped.text) and "7" in stopped.text[:-2]
    before = smollm2_fp32.tokenizer.decode(stopped.token_ids[:-1], skip_special_tokens=True)
    assert "7" not in before[:-2]  # it held first after the last token
    assert other.finish_reason == "length" or "7" in other.text[:-2]


def test_abort_ends_the_call_before_the_next_token(smollm2_fp32):
    """``abort`` (a stopping run cancels the rollout in flight): checked before every token, the call
    raises after the tokens drawn so far; the engine then generates as before."""
    asked = []
    sp = SamplingParams(temperature=0, max_new_tokens=16, abort=lambda: asked.append(1) or len(asked) > 3)
    with pytest.raises(GenerationAborted):
        smollm2_fp32.generate([_chat("Count to twenty.")], sp)
    assert len(asked) == 4  # three tokens, then the abort
    out = smollm2_fp32.generate([_chat("Count to twenty.")], SamplingParams(temperature=0, max_new_tokens=4))[0]
    assert len(out.token_ids) == 4


def test_sampling_reproducible_under_seed(smollm2_fp32):
    sp = SamplingParams(n=3, temperature=1.0, max_new_tokens=16, seed=123)
    req = _chat("Tell me a fun fact.")
    a = smollm2_fp32.generate([req], sp)
    b = smollm2_fp32.generate([_chat("Other prompt in the batch."), req], sp)[3:]
    assert [g.token_ids for g in a] == [g.token_ids for g in b]
    assert len({tuple(g.token_ids) for g in a}) > 1  # the n samples differ
    c = smollm2_fp32.generate([req], sp.replace(seed=124))
    assert [g.token_ids for g in c] != [g.token_ids for g in a]


def test_logprobs_match_teacher_forcing(smollm2_fp32):
    eng = smollm2_fp32
    req = _chat("Explain gravity in one sentence.")
    g = eng.generate([req], SamplingParams(temperature=0.8, max_new_tokens=20, seed=3))[0]
    prompt = eng.encode(req)
    ids = torch.tensor([prompt + g.token_ids])
    with torch.no_grad():
        logits = eng.model(input_ids=ids).logits.float()
    ref = torch.log_softmax(logits[0, len(prompt) - 1 : -1], -1).gather(1, torch.tensor(g.token_ids)[:, None])[:, 0]
    assert torch.allclose(torch.tensor(g.logprobs), ref, atol=1e-3)
    assert eng.sequence_logprobs([prompt], [g.token_ids])[0] == pytest.approx(ref.tolist(), abs=1e-3)


def test_continuation_scoring_ranks_paris(smollm2_fp32):
    ((paris, berlin),) = smollm2_fp32.score_continuations([Req(text="The capital of France is")], [[" Paris", " Berlin"]])
    assert paris > berlin
    # multi-token candidates take the teacher-forced path and agree with its sum
    ((two,),) = smollm2_fp32.score_continuations([Req(text="The capital of France is")], [[" Paris, France"]])
    assert two < paris
    # a candidate with no tokens has no log-prob (it used to read 0.0, i.e. probability 1)
    ((empty, again),) = smollm2_fp32.score_continuations([Req(text="The capital of France is")], [["", " Paris"]])
    assert empty is None and again == pytest.approx(paris, abs=1e-4)


def test_update_weights_changes_outputs_and_version(smollm2_fp32):
    eng = smollm2_fp32
    req = Req(text="The capital of France is")
    before = eng.score_continuations([req], [[" Paris"]])[0][0]
    name = "model.norm.weight"
    orig = eng.model.state_dict()[name].clone()
    try:
        eng.update_weights({name: orig * 0.5}, version=7)
        assert eng.version == 7
        assert eng.score_continuations([req], [[" Paris"]])[0][0] != pytest.approx(before, abs=1e-4)
        with pytest.raises(KeyError):
            eng.update_weights({"nope": orig}, version=8)
    finally:
        eng.update_weights({name: orig}, version=0)
    assert eng.score_continuations([req], [[" Paris"]])[0][0] == pytest.approx(before, abs=1e-5)


def test_prompt_cache_reuses_prefill_and_changes_nothing(smollm2_fp32):
    """Critique-then-score: generate on judge prompts, then score prompt + critique + "Score: ".
    Inside ``prompt_cache`` the second prefill runs only what follows the critique (the generation's
    keys/values are kept with its prompt); scores, and a repeated (retried) generation, must equal
    the uncached ones."""
    eng = smollm2_fp32
    essay = " ".join(f"Fact {i}: the river is {i} km long." for i in range(40))
    base = [
        Req(
            messages=[
                {"role": "user", "content": essay + f" Rate fact {k} from 1 to 10."},
                {"role": "assistant", "content": "Critique:"},
            ],
            continue_final=True,
        )
        for k in (3, 17)
    ]
    sp = SamplingParams(temperature=0.0, max_new_tokens=16)
    cands = [[str(i) for i in range(1, 11)]] * len(base)

    def scored_requests(gens):
        return [
            Req(
                messages=[b.messages[0], {"role": "assistant", "content": "Critique:" + g.text + "\nScore: "}],
                continue_final=True,
            )
            for b, g in zip(base, gens, strict=False)
        ]

    plain_gens = eng.generate(base, sp)
    plain_scores = eng.score_continuations(scored_requests(plain_gens), cands)
    with eng.prompt_cache() as pc:
        gens = eng.generate(base, sp)
        assert pc.entries and pc.hits == 0
        read = scored_requests(gens)
        scores = eng.score_continuations(read, cands)
        assert pc.hits == 2 and pc.reused_tokens >= 2 * 300  # the essay prompt was not recomputed
        # nor the critique: each reading ran a few tokens ("\nScore: " and a seam), not its 15 fed tokens
        ran = sum(len(eng.encode(r)) for r in read) - pc.reused_tokens
        assert all(len(g.token_ids) == 16 for g in gens) and ran <= 2 * 6, ran
        again = eng.generate(base, sp)  # a retry of the same prompts
        assert pc.hits == 4
    assert eng._prompt_cache is None
    assert [g.token_ids for g in gens] == [g.token_ids for g in plain_gens] == [g.token_ids for g in again]
    for a, b in zip(scores, plain_scores, strict=False):
        assert a == pytest.approx(b, abs=1e-3)


def test_shared_prefixes_of_a_judge_batch_are_prefilled_once_and_change_nothing(smollm2_fp32):
    """A checklist batch: 2 instructions x 3 responses x 2 questions. Inside ``prompt_cache`` the
    instruction is computed once per instruction and each response once (not once per question);
    every reading equals the uncached one."""
    eng = smollm2_fp32
    reqs = []
    for topic in ("rivers", "bridges"):
        instruction = " ".join(f"Write about {topic}; sentence {i} must be clear." for i in range(12))
        for r in range(3):
            response = " ".join(f"Answer {r} about {topic}, point {j}." for j in range(10))
            for q in ("Is it clear?", "Does it mention a number?"):
                reqs.append(Req(text=f"[Request]\n{instruction}\n[Answer]\n{response}\n[Question]\n{q}\nAnswer:"))
    cands = [[" Yes", " No"]] * len(reqs)
    plain = eng.score_continuations(reqs, cands)
    full = sum(len(eng.encode(r)) for r in reqs)
    with eng.prompt_cache() as pc:
        cached = eng.score_continuations(reqs, cands)
        assert pc.hits >= len(reqs)  # every reading ran on top of a shared prefix
        # the tails run per reading are the question and what follows it: well under a third of all tokens
        assert full - pc.reused_tokens < full / 3, (full, pc.reused_tokens)
    for a, b in zip(cached, plain, strict=True):
        assert a == pytest.approx(b, abs=1e-3)


def test_bf16_engine_reads_logits_through_an_fp32_head():
    """In bf16 the LM head runs in fp32 (HFEngine's Fp32Head): a candidate's log-prob is the fp32
    log-softmax of the bf16 decoder's last hidden state, not one rounded to bf16's 0.125 steps
    (which tied 41% of a small judge's verdicts); in-place weight updates reach the fp32 copy."""
    from grm.engines.hf import HFEngine

    eng = HFEngine("smollm2-135m-instruct", dtype="bf16")
    head = eng.model.lm_head
    assert eng.head32 is not None and head.weight.dtype == torch.bfloat16
    seen = []
    hook = head.register_forward_pre_hook(lambda mod, args: seen.append(args[0][:, -1].detach().clone()))
    try:
        reqs = [_chat("Is the sky blue? Answer Yes or No."), _chat("Pick A or B.")]
        cands = [[" Yes", " No"], ["A", "B"]]
        got, last = [], []
        for r, c in zip(reqs, cands, strict=True):
            got.append(eng.score_continuations([r], [c])[0])
            last.append(seen[-1])  # single-token candidates are read off the prompt's last position
    finally:
        hook.remove()
    assert all(len(eng.tokenize(c)) == 1 for conts in cands for c in conts)
    for h, conts, scores in zip(last, cands, got, strict=True):
        with torch.inference_mode():
            lp32 = torch.log_softmax(h[0].float() @ head.weight.float().T, -1)
            lp16 = torch.log_softmax((h[0] @ head.weight.T).float(), -1)
        ids = [eng.tokenize(c)[0] for c in conts]
        assert scores == pytest.approx([float(lp32[i]) for i in ids], abs=1e-5)
        rounded = float(lp16[ids[0]] - lp16[ids[1]])
        assert abs(rounded * 8 - round(rounded * 8)) < 1e-3  # the bf16 head's log-odds: a multiple of 1/8
        assert scores[0] - scores[1] != pytest.approx(rounded, abs=1e-4)
    before = got[0][0]
    eng.update_weights({"lm_head.weight": head.weight.detach().float() * 1.5}, 1)
    assert eng.score_continuations(reqs[:1], cands[:1])[0][0] != pytest.approx(before, abs=1e-3)
