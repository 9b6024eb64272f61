"""Generation throughput of the hf engine vs a naive per-prompt ``model.generate`` loop.

Same work for every row: the same prompts (chat-templated), greedy decoding, the same
max_new_tokens, one torch thread. Prints one JSON line per configuration and a summary.

    python benchmarks/generate_throughput.py [--prompts 32] [--new-tokens 32] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import os
import time

from machine import machine  # beside this file

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch-sizes", default="1,8,32")
    ap.add_argument("--naive-prompts", type=int, default=8, help="prompts timed for the naive loop (it is slow)")
    args = ap.parse_args()
    print(json.dumps(machine()), flush=True)

    import torch

    from grm.engines.base import GenerationRequest, SamplingParams
    from grm.engines.hf import HFEngine
    from grm.models.loading import load_model

    torch.set_num_threads(args.threads)
    topics = ["the sea", "prime numbers", "a bicycle", "coffee", "the moon", "rain", "chess", "bread"]
    requests = [
        GenerationRequest(
            messages=[{"role": "user", "content": f"Write a short paragraph about {topics[i % len(topics)]} (#{i})."}]
        )
        for i in range(args.prompts)
    ]
    sp = SamplingParams(temperature=0.0, max_new_tokens=args.new_tokens)
    rows = []
    for dtype in ("fp32", "bf16"):
        model, tok = load_model(args.model, dtype)
        for bs in [int(b) for b in args.batch_sizes.split(",")]:
            eng = HFEngine(args.model, dtype=dtype, max_batch_size=bs, model_obj=model, tokenizer=tok)
            eng.generate(requests[:2], sp.replace(max_new_tokens=4))  # warm-up
            t0 = time.perf_counter()
            gens = eng.generate(requests, sp)
            dt = time.perf_counter() - t0
            n_tok = sum(len(g.token_ids) for g in gens)
            rows.append(
                {
                    "system": "grm-hf",
                    "dtype": dtype,
                    "batch": bs,
                    "tokens": n_tok,
                    "seconds": round(dt, 2),
                    "tokens_per_s": round(n_tok / dt, 1),
                }
            )
            print(json.dumps(rows[-1]), flush=True)
        # naive: one model.generate per prompt, as a first script would do it
        eng = HFEngine(args.model, dtype=dtype, model_obj=model, tokenizer=tok)
        ids = [torch.tensor([eng.encode(r)]) for r in requests[: args.naive_prompts]]
        model.generate(ids[0], max_new_tokens=2, do_sample=False)
        t0 = time.perf_counter()
        n_tok = 0
        for x in ids:
            out = model.generate(
                x, attention_mask=torch.ones_like(x), max_new_tokens=args.new_tokens, do_sample=False, pad_token_id=eng.pad_id
            )
            n_tok += out.shape[1] - x.shape[1]
        dt = time.perf_counter() - t0
        rows.append(
            {
                "system": "naive-generate-loop",
                "dtype": dtype,
                "batch": 1,
                "tokens": n_tok,
                "seconds": round(dt, 2),
                "tokens_per_s": round(n_tok / dt, 1),
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    for dtype in ("fp32", "bf16"):
        naive = next(r for r in rows if r["system"] != "grm-hf" and r["dtype"] == dtype)["tokens_per_s"]
        best = max((r for r in rows if r["system"] == "grm-hf" and r["dtype"] == dtype), key=lambda r: r["batch"])
        print(
            json.dumps(
                {
                    "summary": dtype,
                    "grm_batch": best["batch"],
                    "grm_tokens_per_s": best["tokens_per_s"],
                    "naive_tokens_per_s": naive,
                    "speedup": round(best["tokens_per_s"] / naive, 2),
                }
            )
        )


if __name__ == "__main__":
    main()
