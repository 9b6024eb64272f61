"""Seconds of each policy-side pass of one GRPO step, on the peer benchmark's shape, before/after.

The shape of benchmarks/peer_trl_grpo.py's step: SmolLM2-135M-Instruct in fp32 on the torch
backend, 8 prompts x 4 answers (prompts of 45-58 tokens, answer lengths drawn uniformly from
5-48), micro-batch 8, one torch thread, the GRPO loss with a k3 KL term (0.04) and entropy logged.
Passes timed: the reference's log-probs, the old-policy log-probs, and the optimizer step; each
distinct prompt runs once per micro-batch (``train.share_prompts``) unless ``--whole-rows``.

Every system runs in its own subprocess, interleaved over ``--repeats``; ``@REV`` runs the grm
package of a git worktree of REV on the same batch, so before/after compare in one invocation.
Prints the machine, one JSON line per run, then per system the median of each pass and how
many times faster the first system is.

    python benchmarks/train_passes.py [--systems head,@REV] [--repeats 3] [--steps 2] [--whole-rows]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
PROMPTS, GROUP, MICRO = 8, 4, 8


def child(steps: int, whole_rows: bool, micro: int) -> dict:
    import time

    import torch

    torch.set_num_threads(1)
    from grm.algorithms.algorithm import PolicyLoss
    from grm.models.loading import load_model
    from grm.training import TrainBatch
    from grm.training.models import ReferenceModel
    from grm.training.torch_backend import TorchTrainer

    g = torch.Generator().manual_seed(0)
    prompts, comps, plens = [], [], []
    for _ in range(PROMPTS):
        p = torch.randint(100, 40000, (int(torch.randint(45, 59, (1,), generator=g)),), generator=g).tolist()
        for _ in range(GROUP):
            n = int(torch.randint(5, 49, (1,), generator=g))
            prompts.append(p)
            comps.append(torch.randint(100, 40000, (n,), generator=g).tolist())
            plens.append(len(p))
    adv = torch.randn(PROMPTS * GROUP, generator=g)
    batch = TrainBatch.from_sequences(prompts, comps, pad_id=0, advantages=adv).with_totals()
    if not whole_rows:
        batch = batch.with_fields(prompt_len=torch.tensor(plens))
    policy, _ = load_model("smollm2-135m-instruct", "fp32")
    ref = ReferenceModel(load_model("smollm2-135m-instruct", "fp32")[0], micro_batch_size=micro)
    trainer = TorchTrainer(policy, lr=1e-6, micro_batch_size=micro, entropy=True)
    loss_fn = PolicyLoss(kl_coef=0.04).loss_fn(stale=False)

    def timed(fn):
        t0 = time.perf_counter()
        out = fn()
        return out, time.perf_counter() - t0

    rows: list[dict[str, float]] = []
    for _ in range(steps + 1):  # the first is a warm-up
        ref_lp, t_ref = timed(lambda: ref.logprobs(batch))
        old, t_old = timed(lambda: trainer.logprobs(batch))
        b = batch.with_fields(ref_logprobs=ref_lp, old_logprobs=old)
        _, t_train = timed(lambda b=b: trainer.step(b, loss_fn))
        rows.append({"reference": t_ref, "old_logprobs": t_old, "train_step": t_train})
    kept = rows[1:]
    return {
        "passes_s": {k: round(statistics.median(r[k] for r in kept), 2) for k in kept[0]},
        "runs_s": [{k: round(v, 2) for k, v in r.items()} for r in kept],
        "response_tokens": sum(len(c) for c in comps),
        "padded_response_positions": sum(max(len(c) for c in comps[s : s + micro]) * micro for s in range(0, len(comps), micro)),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--systems", default="head", help="comma separated: head (this checkout) or @REV (a git revision)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--steps", type=int, default=2, help="measured steps per run (after one warm-up)")
    ap.add_argument("--whole-rows", action="store_true", help="no prompt_len field: every row runs whole")
    ap.add_argument("--micro-batch", type=int, default=MICRO, help="rows per forward/backward")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.steps, args.whole_rows, args.micro_batch)), flush=True)
        return 0

    from machine import machine
    from peer_trl_grpo import worktree

    print(json.dumps(machine()), flush=True)
    systems = args.systems.split(",")
    checkouts = {s: worktree(s[1:]) for s in systems if s.startswith("@")}
    results: dict[str, list[dict]] = {s: [] for s in systems}
    for _ in range(args.repeats):
        for s in systems:
            env = {**os.environ, "OMP_NUM_THREADS": "1"}
            if s in checkouts:
                env["PYTHONPATH"] = checkouts[s] + os.pathsep + env.get("PYTHONPATH", "")
            cmd = [
                sys.executable,
                str(Path(__file__).resolve()),
                "--child",
                "--steps",
                str(args.steps),
                "--micro-batch",
                str(args.micro_batch),
            ]
            r = subprocess.run(cmd + (["--whole-rows"] if args.whole_rows else []), capture_output=True, text=True, env=env)
            if r.returncode != 0:
                raise SystemExit(f"{s} failed:\n{r.stderr[-3000:]}")
            res = {"system": s, **json.loads(r.stdout.strip().splitlines()[-1])}
            results[s].append(res)
            print(json.dumps(res), flush=True)
    base = None
    for s in systems:
        med = {k: round(statistics.median(r["passes_s"][k] for r in results[s]), 2) for k in results[s][0]["passes_s"]}
        line = {"system": s, "repeats": args.repeats, "median_s": med, "total_s": round(sum(med.values()), 2)}
        if base is None:
            base = med
        else:
            line[f"{systems[0]}_faster_by"] = {k: round(med[k] / base[k], 2) for k in med}
        print(json.dumps(line), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
