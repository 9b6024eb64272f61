"""Adaptive votes (#44): judge tokens saved against fixed voting, and how often the rewards still
rank a group's responses the same way.

Groups: ``--set mt-bench`` (or llmeval2, faireval: ../shared/data/human-preference, LLMBar format,
read in place) makes each pair one group of two responses; ``--samples RUN/samples.jsonl`` takes a
run's groups (one prompt's responses). The judge (``--judge``, a pointwise model judge; default
``builtin:helpfulness-pointwise-logprob``: a critique, then the score read off its probabilities,
so it never fails to parse) scores every group once per system, through grm's own API
(``grm.judges.load``, ``score_groups``), on the hf engine:

- ``fixed``: ``sampling.n`` = ``--n`` critiques of every response (today's voting; the reference);
- ``adaptive``: ``votes: {first: --first, margin: --margin}``, the rest of the n only where they
  could change the group's ranking;
- ``first-only``: ``sampling.n`` = ``--first`` for every response (what adaptive voting must beat:
  fewer votes everywhere);
- ``fixed-seed1`` (``--noise-floor``): fixed voting again under another seed: how often two
  fixed-voting runs agree, the ceiling any cheaper scheme can be held to.

For each system: generated tokens, calls and seconds of the judge, and the agreement with ``fixed``
on the sign of each response's group advantage (reward minus its group's mean; signs within 1e-9
of 0 are 0), over responses whose groups both systems scored in full. On pairs with human labels
also the accuracy (the response with the higher reward is the labelled one; a tie counts half).
Target (#44): adaptive >= 40% fewer generated tokens than fixed with >= 95% sign agreement.

    python benchmarks/adaptive_votes.py --set mt-bench --limit 80 --model qwen2.5-coder-0.5b-instruct
    python benchmarks/adaptive_votes.py --samples runs/quickstart-.../samples.jsonl --n 4 --noise-floor
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

from machine import describe, machine  # beside this file

os.environ.setdefault("HF_HUB_OFFLINE", "1")
DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "human-preference"
TARGET_SAVED, TARGET_AGREE = 0.40, 0.95


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = ap.add_mutually_exclusive_group()
    src.add_argument("--set", default="mt-bench", help="a human-preference set under ../shared/data (pairs as groups)")
    src.add_argument("--samples", help="a run's samples.jsonl: each prompt's responses are a group")
    ap.add_argument("--judge", default="builtin:helpfulness-pointwise-logprob")
    ap.add_argument("--model", default="qwen2.5-coder-0.5b-instruct")
    ap.add_argument("--dtype", default="auto", help="the judge engine's dtype")
    ap.add_argument("--n", type=int, default=4, help="fixed voting's critiques per response")
    ap.add_argument("--first", type=int, default=1, help="adaptive voting's first critiques")
    ap.add_argument("--margin", type=float, default=0.1, help="adaptive voting's near-tie margin (0-1 rewards)")
    ap.add_argument("--limit", type=int, default=80, help="groups judged (the first N)")
    ap.add_argument("--batch-groups", type=int, default=8, help="groups per score_groups call")
    ap.add_argument("--noise-floor", action="store_true", help="also fixed voting under another seed")
    ap.add_argument("--out", default="bench-out/adaptive-votes.json")
    args = ap.parse_args()
    if not 1 <= args.first < args.n:
        ap.error("need 1 <= --first < --n")
    if args.limit < 1 or args.batch_groups < 1 or not 0 <= args.margin <= 1:
        ap.error("--limit and --batch-groups must be at least 1, --margin in [0, 1]")
    return args


def groups_of(args: argparse.Namespace) -> tuple[list[list[Any]], list[int | None]]:
    """The groups of samples and, per group, the labelled best response's index (None: no label)."""
    from grm.judges import Sample

    groups: list[list[Any]] = []
    labels: list[int | None] = []
    if args.samples:
        by_prompt: dict[str, list[str]] = {}
        for line in Path(args.samples).read_text().splitlines():
            row = json.loads(line)
            if row.get("response") is not None:
                by_prompt.setdefault(row["prompt"], []).append(row["response"])
        for prompt, responses in list(by_prompt.items())[: args.limit]:
            groups.append([Sample(prompt=prompt, response=r, id=f"{len(groups)}-{k}") for k, r in enumerate(responses)])
            labels.append(None)
        return groups, labels
    rows = json.loads((DATA / f"{args.set}.json").read_text())[: args.limit]
    for i, row in enumerate(rows):
        pair = [row["output_1"], row["output_2"]]
        groups.append([Sample(prompt=row["input"], response=r, id=f"{i}-{k}") for k, r in enumerate(pair)])
        labels.append(int(row["label"]) - 1 if str(row.get("label")) in ("1", "2") else None)
    return groups, labels


def judge_groups(ref: str, overrides: list[str], groups: list[list[Any]], per_call: int) -> dict[str, Any]:
    """Every group's rewards under one system, with what the judge's calls cost."""
    from grm.judges import load

    judge = load(ref, overrides=overrides)
    t0 = time.perf_counter()
    rewards: list[list[float | None]] = []
    for k in range(0, len(groups), per_call):
        for g in judge.score_groups(groups[k : k + per_call]):
            rewards.append([None if r is None else r.reward for r in g])
    c = judge.cost
    return {
        "rewards": rewards,
        "seconds": time.perf_counter() - t0,
        "generated_tokens": c.generated_tokens,
        "calls": c.calls,
        "prompt_tokens": c.prompt_tokens,
        "votes_skipped": c.votes_skipped,
    }


def signs(rewards: list[float | None]) -> list[int] | None:
    if any(r is None for r in rewards):
        return None
    mean = sum(rewards) / len(rewards)  # type: ignore[arg-type]
    return [(d > 1e-9) - (d < -1e-9) for d in (r - mean for r in rewards)]  # type: ignore[operator]


def agreement(a: list[list[float | None]], b: list[list[float | None]]) -> tuple[float | None, int, int]:
    """(share of responses with equal advantage signs, responses compared, groups left out as masked)."""
    same = total = masked = 0
    for ra, rb in zip(a, b, strict=True):
        sa, sb = signs(ra), signs(rb)
        if sa is None or sb is None:
            masked += 1
            continue
        same += sum(x == y for x, y in zip(sa, sb, strict=True))
        total += len(sa)
    return (same / total if total else None), total, masked


def accuracy(rewards: list[list[float | None]], labels: list[int | None]) -> float | None:
    hits, n = 0.0, 0
    for rs, lab in zip(rewards, labels, strict=True):
        if lab is None or len(rs) != 2 or None in rs:
            continue
        other = 1 - lab
        hits += 1.0 if rs[lab] > rs[other] else 0.5 if rs[lab] == rs[other] else 0.0  # type: ignore[operator]
        n += 1
    return hits / n if n else None


def main() -> int:
    args = parse_args()
    facts = machine()
    print(json.dumps(facts), flush=True)
    groups, labels = groups_of(args)
    base = [f"model={args.model}", f"engine.dtype={args.dtype}"]
    systems = {
        "fixed": [*base, f"sampling.n={args.n}"],
        "adaptive": [*base, f"sampling.n={args.n}", f"votes={{first: {args.first}, margin: {args.margin}}}"],
        "first-only": [*base, f"sampling.n={args.first}"],
    }
    if args.noise_floor:
        systems["fixed-seed1"] = [*base, f"sampling.n={args.n}", "sampling.seed=1"]
    out: dict[str, Any] = {"machine": facts, "args": vars(args), "groups": len(groups), "systems": {}}
    for name, overrides in systems.items():
        print(f"judging {len(groups)} groups: {name}", flush=True)
        out["systems"][name] = judge_groups(args.judge, overrides, groups, args.batch_groups)
    fixed = out["systems"]["fixed"]
    print(f"\n{args.judge} on {args.model}; {len(groups)} groups from {args.samples or args.set}; n={args.n}, ", end="")
    print(f"first={args.first}, margin={args.margin}\n")
    print("| system | generated tokens | vs fixed | calls | seconds | sign agreement with fixed | masked groups | accuracy |")
    print("|---|---|---|---|---|---|---|---|")
    for name, s in out["systems"].items():
        agree, compared, masked = agreement(s["rewards"], fixed["rewards"])
        acc = accuracy(s["rewards"], labels)
        saved = 1 - s["generated_tokens"] / fixed["generated_tokens"] if fixed["generated_tokens"] else None
        s.update(agreement=agree, compared=compared, masked_groups=masked, accuracy=acc, tokens_saved=saved)
        print(
            f"| {name} | {s['generated_tokens']} | {'-' if saved is None else f'{-100 * saved + 0.0:+.1f}%'} | {s['calls']} | "
            f"{s['seconds']:.1f} | {'-' if agree is None else f'{100 * agree:.1f}%'} ({compared}) | {masked} | "
            f"{'-' if acc is None else f'{100 * acc:.1f}%'} |"
        )
    a = out["systems"]["adaptive"]
    met = a["tokens_saved"] is not None and a["agreement"] is not None
    met = met and a["tokens_saved"] >= TARGET_SAVED and a["agreement"] >= TARGET_AGREE
    print(
        f"\nadaptive: {100 * (a['tokens_saved'] or 0):.1f}% fewer generated tokens, "
        f"{100 * (a['agreement'] or 0):.1f}% sign agreement; target >= {100 * TARGET_SAVED:.0f}% and "
        f">= {100 * TARGET_AGREE:.0f}%: {'met' if met else 'not met'}"
    )
    print(f"cpu: {describe(facts)}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
