"""The built-in pointwise judge on SmolLM2: parse-failure rate with the regex parser vs the logprob
parser, and seconds per judged item batched vs one by one.

Items: the first --items responses of builtin:arith-pairs (correct and wrong answers alternate).

    python benchmarks/judge_parse_rate.py [--items 50] [--one-by-one 8]
"""

from __future__ import annotations

import argparse
import json
import os
import time

from machine import machine  # beside this file

from grm.judges.base import score_one
from grm.judges.runtime import load_engine

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--items", type=int, default=50)
    ap.add_argument("--one-by-one", type=int, default=8, help="items timed one call each (slow)")
    args = ap.parse_args()
    print(json.dumps(machine()), flush=True)

    from grm.data.builtin import arith_pairs
    from grm.judges import Sample
    from grm.judges.runtime import load

    rows = arith_pairs(args.items)
    samples = [Sample(prompt=r["input"], response=r[f"output_{1 + i % 2}"], id=r["id"]) for i, r in enumerate(rows)]
    for ref in ("builtin:helpfulness-pointwise", "builtin:helpfulness-pointwise-logprob"):
        judge = load(ref)
        _ = load_engine(judge)
        judge.score_batch(samples[:1])  # warm-up
        t0 = time.perf_counter()
        res = judge.score_batch(samples)
        batched = (time.perf_counter() - t0) / len(samples)
        first_try = [s for r in res for s in r.samples if s.attempt == 0]
        t0 = time.perf_counter()
        for s in samples[: args.one_by_one]:
            score_one(judge, s)
        single = (time.perf_counter() - t0) / args.one_by_one
        print(
            json.dumps(
                {
                    "judge": judge.spec.name,
                    "parser": judge.spec.parser.type,
                    "items": len(samples),
                    "n": judge.spec.sampling.n,
                    "sample_parse_failure_rate_first_try": round(sum(s.error is not None for s in first_try) / len(first_try), 3),
                    "sample_parse_failure_rate_all_attempts": round(
                        sum(r.parse_failures for r in res) / sum(len(r.samples) for r in res), 3
                    ),
                    "masked_items": sum(r.masked for r in res),
                    "seconds_per_item_batched": round(batched, 2),
                    "seconds_per_item_one_by_one": round(single, 2),
                    "speedup": round(single / batched, 2),
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
