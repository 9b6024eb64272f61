"""Labelled pairs from a policy's own samples: the judge gate the instruct pipelines need.

``builtin:constraints-lexical-pairs`` pairs templated responses, one of which breaks one constraint
plainly; a judge can read those (Qwen2.5-Coder-1.5B: 0.98) and still not read what the policy
writes. This script takes the samples of runs on ``constraints(-lexical)-train`` whose
``constraints`` verifier (a judge or a weight-0 monitor) scored every sample, and from every group
holding both a response that follows all of its prompt's constraints and one that does not, makes
one pair (the first of each, in sample order; label alternating 1/2), with the prompt's checklist
and constraints. The result is an LLMBar-style JSONL for ``grm eval`` (``--map checklist=checklist``)
or a pipeline's ``gate.data``.

    python benchmarks/policy_pairs.py bench-out/learning-curve/verifier/run --out bench-out/policy-pairs.jsonl
    grm eval builtin:checklist-data-logprob --data bench-out/policy-pairs.jsonl --map checklist=checklist \\
        model=qwen2.5-coder-1.5b-instruct engine.dtype=auto --out bench-out/policy-pairs-eval
"""

from __future__ import annotations

import argparse
import json
from collections import Counter, defaultdict
from pathlib import Path

from machine import machine  # beside this file


def dataset_rows(prompt_ids: set[str]) -> dict[str, dict]:
    """The built-in rows behind ``prompt_ids`` (``constraints-lexical-train-372`` is row id 372 of
    ``builtin:constraints-lexical-train``)."""
    from grm.data.builtin import SETS

    out: dict[str, dict] = {}
    for name in sorted({pid.rsplit("-", 1)[0] for pid in prompt_ids}):
        if name not in SETS:
            raise SystemExit(f"prompt ids of {name!r} are not a built-in set: {sorted(SETS)}")
        out.update({str(r["id"]): r for r in SETS[name]()})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", help="run directories (their samples.jsonl)")
    ap.add_argument("--judge", default="constraints", help="the verifier in samples.jsonl that labels them")
    ap.add_argument("--out", required=True)
    ap.add_argument("--limit", type=int, default=None, help="at most this many pairs")
    args = ap.parse_args()
    print(json.dumps(machine()), flush=True)

    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for run in args.runs:
        path = Path(run) / "samples.jsonl"
        for line in path.read_text().splitlines():
            if line.strip():
                s = json.loads(line)
                v = (s.get("judges") or {}).get(args.judge)
                if v and v.get("score") is not None:
                    groups[(run, s["group"])].append(s)
    rows = dataset_rows({s["prompt_id"] for ss in groups.values() for s in ss})
    pairs, broken = [], Counter()
    for (run, group), ss in groups.items():
        good = [s for s in ss if s["judges"][args.judge]["score"] == 1.0]
        bad = [s for s in ss if s["judges"][args.judge]["score"] == 0.0]
        if not good or not bad:
            continue
        g, b = good[0], bad[0]
        row = rows[g["prompt_id"]]
        failed = sorted(k for k, v in (b["judges"][args.judge].get("details") or {}).items() if v != 1.0)
        broken.update(failed)
        label = 1 + len(pairs) % 2
        outs = (g["response"], b["response"]) if label == 1 else (b["response"], g["response"])
        pairs.append(
            {
                "id": f"{Path(run).parent.name}-{group}",
                "input": row["prompt"],
                "output_1": outs[0],
                "output_2": outs[1],
                "label": label,
                "checklist": row["checklist"],
                "constraints": row["constraints"],
                "broken": ",".join(failed),
            }
        )
        if args.limit and len(pairs) >= args.limit:
            break
    Path(args.out).write_text("".join(json.dumps(p) + "\n" for p in pairs))
    longer = sum(len(p[f"output_{p['label']}"]) > len(p[f"output_{3 - p['label']}"]) for p in pairs)
    print(
        json.dumps(
            {
                "pairs": len(pairs),
                "groups_read": len(groups),
                "broken_types": dict(broken.most_common()),
                "following_is_longer": round(longer / len(pairs), 3) if pairs else None,
                "out": args.out,
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
