"""One AdamW step over a policy's parameters: torch's default on a CPU (a loop of elementwise ops
per tensor) against the fused kernel grm's trainers use (``grm.training.core.adamw``).

Loads ``--model`` (fp32), gives every parameter a random gradient, and times ``--steps`` optimizer
steps of each kind at ``--threads`` torch threads; the first step (which allocates the moments) is
printed apart. Prints the machine, then one JSON line per kind (median and min-max of the later
steps) and their ratio, and the largest difference between the two kinds' weights after the steps.

    python benchmarks/optimizer_step.py [--model smollm2-135m-instruct] [--threads 1] [--steps 6]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import machine  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m-instruct", help="a builtin alias or a model directory")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=6)
    args = ap.parse_args()
    if args.threads < 1 or args.steps < 2:
        ap.error("--threads must be at least 1 and --steps at least 2")
    import torch

    from grm.models.loading import load_model

    torch.set_num_threads(args.threads)
    print(json.dumps(machine()))
    module = load_model(args.model, "fp32")[0]
    params = [p for p in module.parameters() if p.requires_grad]
    start = [p.detach().clone() for p in params]
    gen = torch.Generator().manual_seed(0)
    grads = [torch.randn(p.shape, generator=gen) * 1e-3 for p in params]
    after: dict[str, list] = {}
    median: dict[str, float] = {}
    for kind, fused in (("loop", None), ("fused", True)):
        with torch.no_grad():
            for p, s in zip(params, start, strict=True):
                p.copy_(s)
        for p, g in zip(params, grads, strict=True):
            p.grad = g.clone()
        opt = torch.optim.AdamW(params, lr=1e-6, weight_decay=0.0, fused=fused)
        times = []
        for _ in range(args.steps):
            t0 = time.perf_counter()
            opt.step()
            times.append(time.perf_counter() - t0)
        after[kind] = [p.detach().clone() for p in params]
        median[kind] = statistics.median(times[1:])
        row = {
            "optimizer": kind,
            "params": sum(p.numel() for p in params),
            "threads": args.threads,
            "first_step_s": round(times[0], 3),
        }
        print(
            json.dumps(
                {
                    **row,
                    "median_step_s": round(median[kind], 4),
                    "min_max_step_s": [round(min(times[1:]), 4), round(max(times[1:]), 4)],
                }
            )
        )
    diff = max(float((a - b).abs().max()) for a, b in zip(after["loop"], after["fused"], strict=True))
    print(json.dumps({"pair": "loop / fused", "step_time": round(median["loop"] / median["fused"], 2), "max_weight_diff": diff}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
