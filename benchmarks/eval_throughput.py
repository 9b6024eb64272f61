"""Judgments per second of `grm eval` vs a naive one-at-a-time `model.generate` loop, same prompts.

Data: ../shared/data/human-preference/mt-bench.json (LLMBar format; not shipped, read in place).
Judge: the built-in pairwise judge (both presentation orders). Prints JSON lines: grm's metrics
(accuracy per order, positional agreement, parse failures) and throughput, the naive loop's
throughput on the first --naive-items pairs, the speed-up, and its bound: the same prompts'
prefill alone (one forward each, no generation), which batching cannot remove, so the speed-up
cannot exceed naive time / prefill time.

    python benchmarks/eval_throughput.py [--judge builtin:pairwise-preference] [--limit 200] [--naive-items 8]
        [on_failure.retries=0]

The naive loop never retries; pass ``on_failure.retries=0`` for equal work (one generation per
prompt in both systems), or leave the judge's retries on to see what they cost.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from machine import machine  # beside this file

from grm.judges.render import render
from grm.judges.runtime import load_engine

os.environ.setdefault("HF_HUB_OFFLINE", "1")
DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "human-preference" / "mt-bench.json"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--judge", default="builtin:pairwise-preference")
    ap.add_argument("--data", default=str(DATA))
    ap.add_argument("--limit", type=int, default=200)
    ap.add_argument("--naive-items", type=int, default=8)
    ap.add_argument("--out", default=None, help="eval output dir (default: a temp dir)")
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()
    print(json.dumps(machine()), flush=True)
    if not Path(args.data).exists():
        print(f"skipped: {args.data} not found (the shared data sits beside the checkout, not in it)")
        return 0

    import torch

    from grm.data.items import default_map, to_items
    from grm.data.sources import load_rows
    from grm.evaluation.runner import EvalConfig, load_judges, run, samples_for

    out = Path(args.out or tempfile.mkdtemp(prefix="grm-eval-bench-"))
    t0 = time.perf_counter()
    m = run(EvalConfig(judges=[args.judge], data=args.data, out=out, limit=args.limit, overrides=args.overrides))
    wall = time.perf_counter() - t0
    name, jm = next(iter(m["judges"].items()))
    p = jm.get("pairs", {})
    grm_rate = jm["judgments_per_s"]  # judge seconds recorded per batch: also right for a resumed run
    print(
        json.dumps(
            {
                "system": "grm-eval",
                "judge": name,
                "pairs": jm["items"],
                "wall_s": round(wall, 1),
                "pairs_per_s": round(grm_rate, 4),
                "accuracy_order1": p.get("accuracy_order1"),
                "accuracy_order2": p.get("accuracy_order2"),
                "accuracy_average": p.get("accuracy_average"),
                "accuracy_swap_combined": p.get("accuracy_swap_combined"),
                "positional_agreement": p.get("positional_agreement"),
                "parse_failure_rate": jm["parse_failure_rate"],
                "out": str(out),
            }
        ),
        flush=True,
    )

    # naive: the same rendered prompts, one model.generate call per prompt and order
    judge = load_judges([args.judge], args.overrides)[0]
    eng = load_engine(judge)
    rows = load_rows(args.data)
    items, _ = to_items(rows, default_map(args.data, set(rows[0])), args.data)
    sp = judge.spec.sampling
    t0 = time.perf_counter()
    n_gen = 0
    for it in items[: args.naive_items]:
        for s in samples_for(judge.spec, it):
            for v in (st for st in render(judge, s) if st["stage"] == "judge"):
                ids = torch.tensor([eng.encode(v["request"])])
                for _ in range(v["n"]):
                    with torch.inference_mode():
                        eng.model.generate(
                            ids,
                            attention_mask=torch.ones_like(ids),
                            max_new_tokens=sp.max_new_tokens,
                            do_sample=sp.temperature > 0,
                            temperature=sp.temperature or None,
                            pad_token_id=eng.pad_id,
                        )
                    n_gen += 1
    naive_wall = time.perf_counter() - t0
    naive_rate = args.naive_items / naive_wall
    print(
        json.dumps(
            {
                "system": "naive-generate-loop",
                "pairs": args.naive_items,
                "generations": n_gen,
                "wall_s": round(naive_wall, 1),
                "pairs_per_s": round(naive_rate, 4),
            }
        )
    )
    print(json.dumps({"speedup": round(grm_rate / naive_rate, 2)}))

    # the bound: the prompts' prefill (one forward each) is work batching does not remove (grm
    # computes only the instructions shared by a batch once, a small part of these prompts), so
    # the speed-up over the naive loop cannot much exceed naive time / prefill time (free decode)
    t0, n_tok = time.perf_counter(), 0
    for it in items[: args.naive_items]:
        for s in samples_for(judge.spec, it):
            for v in (st for st in render(judge, s) if st["stage"] == "judge"):
                ids = torch.tensor([eng.encode(v["request"])])
                n_tok += ids.shape[1]
                with torch.inference_mode():
                    eng.model(ids, use_cache=False, logits_to_keep=1)
    prefill = time.perf_counter() - t0
    print(
        json.dumps(
            {
                "naive_prefill_s": round(prefill, 1),
                "prompt_tokens": n_tok,
                "prefill_share_of_naive": round(prefill / naive_wall, 3),
                "speedup_bound_decode_free": round(naive_wall / prefill, 2),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
