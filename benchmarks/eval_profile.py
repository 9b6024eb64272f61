"""Where `grm eval`'s time goes, against the bound `eval_throughput.py` reports.

Scores the first --limit mt-bench pairs with a judge (default the built-in pairwise judge, both
orders) the way `grm eval` does (--batch-size items per judge call) and splits its seconds into
the hf engine's prefill, its decode steps (with the rows they carried) and the rest; then times
the same prompts' prefill one at a time (the bound: a judgment cannot take less than its prompt's
prefill); then the cost of one decode step by rows in the batch and cache length, on made-up
prompts. Prints JSON lines after the machine line.

    python benchmarks/eval_profile.py [--limit 24] [--batch-size 16] [--judge builtin:pairwise-preference]
        [on_failure.retries=0]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from eval_throughput import DATA  # beside this file; it also sets HF_HUB_OFFLINE
from machine import machine

from grm.judges.render import render
from grm.judges.runtime import load_engine


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--judge", default="builtin:pairwise-preference")
    ap.add_argument("--data", default=str(DATA))
    ap.add_argument("--limit", type=int, default=24)
    ap.add_argument("--batch-size", type=int, default=16, help="items per judge call (grm eval's default)")
    ap.add_argument("--steps", default="700x1,700x4,700x16,700x32,1400x1,1400x32", help="decode steps to time: LENGTHxROWS,...")
    ap.add_argument("overrides", nargs="*", default=["on_failure.retries=0"])
    args = ap.parse_args()
    print(json.dumps(machine()), flush=True)
    if not Path(args.data).exists():
        print(f"skipped: {args.data} not found (the shared data sits beside the checkout, not in it)")
        return 0

    import torch

    import grm.engines.hf as hf
    from grm.data.items import default_map, to_items
    from grm.data.sources import load_rows
    from grm.engines.kvcache import prefill
    from grm.evaluation.runner import load_judges, samples_for

    rows = load_rows(args.data)
    items, _ = to_items(rows, default_map(args.data, set(rows[0])), args.data)
    items = items[: args.limit]
    judge = load_judges([args.judge], args.overrides)[0]
    eng = load_engine(judge)
    model = eng.model
    forward = model.forward
    spent = {"prefill": 0.0, "decode": 0.0, "steps": 0, "row_steps": 0}

    def timed_prefill(*a, **k):
        t = time.perf_counter()
        try:
            return prefill(*a, **k)
        finally:
            spent["prefill"] += time.perf_counter() - t

    def timed_forward(*a, **k):
        ids = k.get("input_ids")
        t = time.perf_counter()
        out = forward(*a, **k)
        if ids is not None and ids.shape[1] == 1:  # a decode step (prefill calls run whole prompts)
            spent["decode"] += time.perf_counter() - t
            spent["steps"] += 1
            spent["row_steps"] += ids.shape[0]
        return out

    hf.prefill, model.forward = timed_prefill, timed_forward
    t0 = time.perf_counter()
    results = []
    for i in range(0, len(items), args.batch_size):
        results += judge.score_batch([s for it in items[i : i + args.batch_size] for s in samples_for(judge.spec, it)])
    wall = time.perf_counter() - t0
    hf.prefill, model.forward = prefill, forward

    t0, prompts, tokens = time.perf_counter(), 0, 0
    for it in items:
        for s in samples_for(judge.spec, it):
            for v in (st for st in render(judge, s) if st["stage"] == "judge"):
                ids = torch.tensor([eng.encode(v["request"])])
                prompts, tokens = prompts + v["n"], tokens + ids.shape[1]
                with torch.inference_mode():
                    model(ids, use_cache=False, logits_to_keep=1)
    bound = time.perf_counter() - t0
    print(
        json.dumps(
            {
                "judge": judge.spec.name,
                "items": len(items),
                "prompts": prompts,
                "prompt_tokens": tokens,
                "batch_size_items": args.batch_size,
                "eval_s": round(wall, 2),
                "prefill_s": round(spent["prefill"], 2),
                "decode_s": round(spent["decode"], 2),
                "decode_steps": spent["steps"],
                "rows_per_step": round(spent["row_steps"] / max(1, spent["steps"]), 1),
                "tokens_per_row": round(spent["row_steps"] / max(1, prompts), 1),
                "other_s": round(wall - spent["prefill"] - spent["decode"], 2),
                "prefill_one_at_a_time_s": round(bound, 2),
                "share_of_bound": round(bound / wall, 3),
                "masked": sum(r.verdict is None and r.score is None for r in results),
            }
        ),
        flush=True,
    )

    for spec in args.steps.split(","):
        length, batch = (int(x) for x in spec.split("x"))
        fake = [[100 + (b * 7 + j) % 5000 for j in range(length)] for b in range(batch)]
        times = []
        with torch.inference_mode():
            cache, logits, attn = prefill(model, fake, eng.pad_id, extra=16)
            tok = logits.argmax(-1)
            for _ in range(12):
                attn = torch.cat([attn, attn.new_ones((batch, 1))], 1)
                t = time.perf_counter()
                pos = attn.sum(-1, keepdim=True) - 1
                out = model(input_ids=tok[:, None], attention_mask=attn, position_ids=pos, past_key_values=cache)
                times.append(time.perf_counter() - t)
                tok = out.logits[:, -1].argmax(-1)
        times = sorted(times[2:])
        med = times[len(times) // 2]
        print(
            json.dumps(
                {
                    "decode_step": {"cache_tokens": length, "rows": batch},
                    "ms": round(1000 * med, 1),
                    "ms_min": round(1000 * times[0], 1),
                    "ms_per_row": round(1000 * med / batch, 1),
                }
            ),
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
