"""The hf engine's prompt KV cache, A/B on the same items: a critique-then-score judge batch with
the cache (the default) and without it, alternating, plus the largest score difference.

A critique-then-score judge prefills each judge prompt twice: once to write the critique, once more
(prompt + critique + the score prefix) to read the score's log-probs. With the cache the second
pass runs only the critique and prefix tokens.

A checklist judge reads every response once per question of its prompt's checklist, and a GRPO step
judges a group of responses per prompt: with the cache, the prefixes these readings share (the
judge header, then each question with its instruction) are prefilled once each and every reading
runs only its own response and closing lines.

Items: responses of ../shared/data/human-preference/mt-bench.json (read in place, not shipped); the
built-in arithmetic set when that file is absent. A checklist judge reads a GRPO-shaped batch
instead: --group responses per prompt of builtin:constraints-lexical-train, sampled from SmolLM2
as the instruct pipelines' policy samples them (temperature 1, 128 tokens).

    python benchmarks/prompt_cache.py [--items 32] [--batch 16] [--repeats 2]
    python benchmarks/prompt_cache.py --judge builtin:pairwise-rules-cot-logprob --items 8 \
        model=qwen2.5-coder-1.5b-instruct
    python benchmarks/prompt_cache.py --judge builtin:checklist-data-logprob --items 32 --batch 32 \
        --group 8 --repeats 1 model=qwen2.5-coder-1.5b-instruct
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import time
from pathlib import Path

from machine import machine  # beside this file

from grm.judges.runtime import load_engine

os.environ.setdefault("HF_HUB_OFFLINE", "1")

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "human-preference" / "mt-bench.json"


def _group_samples(n: int, group: int) -> tuple[list, str]:
    """``n`` responses, ``group`` per prompt, with the prompt's checklist (a GRPO step's judge batch)."""
    from grm.data.builtin import SETS
    from grm.engines.base import GenerationRequest, SamplingParams
    from grm.engines.hf import HFEngine
    from grm.judges import Sample

    rows = SETS["constraints-lexical-train"]()[: math.ceil(n / group)]
    policy = HFEngine("smollm2-135m-instruct", dtype="fp32")
    reqs = [GenerationRequest(messages=[{"role": "user", "content": r["prompt"]}]) for r in rows]
    gens = policy.generate(reqs, SamplingParams(n=group, temperature=1.0, max_new_tokens=128, seed=0))
    out = [
        Sample(prompt=r["prompt"], response=gens[k * group + j].text, metadata={"checklist": r["checklist"]}, id=f"{k}-{j}")
        for k, r in enumerate(rows)
        for j in range(group)
    ]
    questions = sum(len(s.metadata["checklist"]) for s in out[:n])
    return out[:n], f"builtin:constraints-lexical-train, {group} SmolLM2 samples per prompt, {questions} questions"


def _samples(mode: str, n: int, group: int) -> tuple[list, str]:
    from grm.judges import Sample

    if mode == "checklist":
        return _group_samples(n, group)

    if DATA.exists():
        rows, source = json.loads(DATA.read_text()), DATA.name
    else:
        from grm.data.builtin import arith_pairs

        rows, source = arith_pairs(n), "builtin:arith-pairs"
    if mode == "pairwise":
        return [
            Sample(prompt=r["input"], responses=[r["output_1"], r["output_2"]], id=str(k)) for k, r in enumerate(rows[:n])
        ], source
    out = [Sample(prompt=r["input"], response=r[f"output_{1 + j}"], id=f"{k}-{j}") for k, r in enumerate(rows) for j in range(2)]
    return out[:n], source


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--judge", default="builtin:helpfulness-pointwise-logprob")
    ap.add_argument("--items", type=int, default=32, help="judged items (responses, or pairs for a pairwise judge)")
    ap.add_argument("--batch", type=int, default=16, help="items per score_batch call (a grm eval batch)")
    ap.add_argument("--group", type=int, default=8, help="checklist judges: responses per prompt")
    ap.add_argument("--repeats", type=int, default=2, help="timed passes per setting, alternating off/on")
    ap.add_argument("overrides", nargs="*", help="judge spec overrides, e.g. model=qwen2.5-coder-1.5b-instruct")
    args = ap.parse_args()
    print(json.dumps(machine()), flush=True)

    from grm.judges.runtime import load

    judge = load(args.judge, overrides=args.overrides)
    engine = load_engine(judge)
    samples, source = _samples(judge.spec.mode, args.items, args.group)
    batches = [samples[i : i + args.batch] for i in range(0, len(samples), args.batch)]
    judge.score_batch(samples[:1])  # warm-up: weights paged in, kernels picked

    def run(cached: bool) -> tuple[float, list[float]]:
        # The judge runtime opens the cache only if the engine has one; hiding it on the instance
        # gives the engine without the cache, everything else equal.
        if cached:
            engine.__dict__.pop("prompt_cache", None)
        else:
            engine.prompt_cache = None
        t0 = time.perf_counter()
        scores = [r.margin if r.margin is not None else r.score for b in batches for r in judge.score_batch(b)]
        return time.perf_counter() - t0, scores

    seconds: dict[bool, list[float]] = {False: [], True: []}
    scores: dict[bool, list[float]] = {}
    for _ in range(args.repeats):
        for cached in (False, True):
            dt, sc = run(cached)
            seconds[cached].append(dt)
            scores[cached] = sc
    engine.__dict__.pop("prompt_cache", None)

    diffs = [
        abs(a - b)
        for a, b in zip(scores[False], scores[True], strict=False)
        if a is not None and b is not None and not (math.isnan(a) or math.isnan(b))
    ]
    off, on = statistics.median(seconds[False]), statistics.median(seconds[True])
    print(
        json.dumps(
            {
                "judge": judge.spec.name,
                "model": judge.spec.model,
                "items": len(samples),
                "source": source,
                "batch": args.batch,
                "repeats": args.repeats,
                "seconds_per_item_without_cache": round(off / len(samples), 3),
                "seconds_per_item_with_cache": round(on / len(samples), 3),
                "speedup": round(off / on, 3),
                "runs_without": [round(s, 1) for s in seconds[False]],
                "runs_with": [round(s, 1) for s in seconds[True]],
                "max_abs_score_difference": round(max(diffs), 6) if diffs else None,
                "scored_items": len(diffs),
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
