"""How much of real, benign text ``guard.neutralise`` touches, and so how far it can move a judge's
accuracy on human-preference data: a pair whose two responses are both untouched is judged on the
same prompt with the guard on or off, so at most the touched pairs can change their outcome.

Reads ../shared/data/human-preference/{mt-bench,llmeval2,faireval}.json (LLMBar format); prints per
set the responses and pairs changed, the accuracy bound in points, and every removed span. No
model runs (seconds).

    python benchmarks/neutralise_reach.py
"""

from __future__ import annotations

import argparse
import difflib
import json
from pathlib import Path

from grm.judges.neutralise import neutralise

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "human-preference"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sets", default="mt-bench,llmeval2,faireval")
    ap.add_argument("--data", default=str(DATA), help="directory of the LLMBar-format JSON files")
    args = ap.parse_args()
    for name in args.sets.split(","):
        pairs = json.loads((Path(args.data) / f"{name}.json").read_text())
        touched_pairs, touched, removed = 0, 0, []
        for p in pairs:
            hit = False
            for k in ("output_1", "output_2"):
                out = neutralise(p[k])
                if out.removed:
                    hit = True
                    touched += 1
                    diff = difflib.ndiff(p[k].split("\n"), out.text.split("\n"))
                    removed += [line[2:] for line in diff if line.startswith("- ")]
            touched_pairs += hit
        bound = 100 * touched_pairs / len(pairs)
        print(
            json.dumps(
                {
                    "set": name,
                    "pairs": len(pairs),
                    "responses_changed": touched,
                    "responses": 2 * len(pairs),
                    "pairs_changed": touched_pairs,
                    "max_accuracy_change_points": round(bound, 2),
                }
            )
        )
        for line in removed:
            print(f"  removed from a line: {line[:160]!r}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
