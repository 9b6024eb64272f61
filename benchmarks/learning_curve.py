"""Run the quickstart (or a variant) long enough for the rule-verifier reward to move, and print
the mean reward of the first and last 5 steps with their std.

    python benchmarks/learning_curve.py [--steps 30] [extra key=value overrides ...]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pipeline", default="builtin:quickstart")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--out", default=None)
    ap.add_argument("overrides", nargs="*", help="e.g. train.lr=1e-5 schedule.mode=sync")
    args = ap.parse_args()
    out = Path(args.out or tempfile.mkdtemp(prefix="grm-curve-")) / "run"
    cmd = [
        sys.executable,
        "-m",
        "grm",
        "run",
        args.pipeline,
        f"train.steps={args.steps}",
        f"out_dir={out}",
        "checkpoint.every=0",
        *args.overrides,
    ]
    print("running:", " ".join(cmd), flush=True)
    r = subprocess.run(cmd)
    if r.returncode != 0:
        return r.returncode
    ms = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if x.strip()]
    keys = ["reward_mean"] + sorted(k for k in ms[0] if k.startswith("reward/"))
    for k in keys:
        first = [m[k] for m in ms[:5] if m.get(k) is not None]
        last = [m[k] for m in ms[-5:] if m.get(k) is not None]
        print(
            json.dumps(
                {
                    "metric": k,
                    "first5_mean": round(statistics.mean(first), 4),
                    "first5_std": round(statistics.pstdev(first), 4),
                    "last5_mean": round(statistics.mean(last), 4),
                    "last5_std": round(statistics.pstdev(last), 4),
                }
            )
        )
    phases = [
        "seconds_step",
        "seconds_rollout",
        "seconds_judging",
        "seconds_reference",
        "seconds_training",
        "seconds_sync",
        "seconds_idle",
    ]
    print(json.dumps({k: round(statistics.median(m[k] for m in ms[1:] or ms), 2) for k in phases} | {"run_dir": str(out)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
