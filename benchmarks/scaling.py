"""Scale-out on this machine: training tokens/s of `grm run` with 1 vs 2 policy ranks, and judge
items/s with 1 vs 2 replicas of a judge, each with the efficiency it reaches
(rate at 2 / (2 x rate at 1)).

Training: `grm run builtin:arith-verifier` (sync, rule judge, reference beside the policy) on a pool
of `--cpus` CPUs as one rank with all of its threads, then as two DeepSpeed ranks (gloo) with half
each; the same global batch and seed, so both train on the same rollouts. Tokens/s = response
(loss) tokens trained / `seconds_training`, over the steps after the first (warm-up).

Judges: grm's own `JudgeActor`s on one placement group of `--cpus` CPUs, R replicas with `cpus / R`
threads each, fed chunks of `--chunk` samples through the judge dispatch's own `least_loaded` choice,
one call in flight per replica; items/s = samples judged / wall seconds after one warm-up call per
replica.

    python benchmarks/scaling.py [--steps 4] [--chunks 12] [--judge builtin:pointwise-logprob] [--skip-train] [--skip-judge]

Prints the CPU model and SIMD flags first, then one JSON line per measurement and a summary.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from machine import machine  # beside this file

ROOT = Path(__file__).resolve().parents[1]


def train_rate(ranks: int, steps: int, cpus: int, tmp: Path) -> dict[str, object]:
    from grm.config.resolve import load_pipeline

    out = tmp / f"ranks{ranks}"
    cmd = [
        sys.executable,
        "-m",
        "grm",
        "run",
        "builtin:arith-verifier",
        f"out_dir={out}",
        f"train.steps={steps}",
        "schedule.mode=sync",
        "checkpoint.every=0",
        "checkpoint.export=false",  # timed: the run, not the model export after it
        f"pools.train.cpus={cpus}",
        f"train.backend.ranks={ranks}",
    ]
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "HF_HUB_OFFLINE": "1"}
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"grm run failed ({ranks} ranks):\n{r.stderr[-3000:]}")
    ms = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if x.strip()]
    shutil.rmtree(out, ignore_errors=True)  # a checkpoint is ~1.6 GB
    rows = ms[1:]
    a = load_pipeline("builtin:arith-verifier").spec.algorithm
    tokens = sum(m["response_len_mean"] * a.prompts_per_step * a.group_size for m in rows)
    secs = sum(m["seconds_training"] for m in rows)
    return {
        "phase": "train",
        "ranks": ranks,
        "threads_per_rank": cpus // ranks,
        "steps_measured": len(rows),
        "response_tokens": round(tokens),
        "seconds_training": round(secs, 2),
        "tokens_per_s": round(tokens / secs, 2),
        "seconds_step_median": sorted(m["seconds_step"] for m in rows)[len(rows) // 2],
        "seconds_rollout_median": sorted(m["seconds_rollout"] for m in rows)[len(rows) // 2],
        "reward_mean_last": rows[-1]["reward_mean"],
    }


def judge_rate(replicas: int, judge: str, chunks: int, chunk: int, cpus: int) -> dict[str, object]:
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    from grm.config import load_judge
    from grm.config.paths import resolve_judge
    from grm.data.builtin import arith_pairs
    from grm.judges.types import Sample
    from grm.orchestrator.frozen_actors import JudgeActor
    from grm.orchestrator.judge_dispatch import least_loaded
    from grm.orchestrator.types import Replica

    path = resolve_judge(judge, ROOT, [])
    spec = load_judge(path)
    pg = placement_group([{"CPU": float(cpus)}], strategy="STRICT_PACK")
    ray.get(pg.ready())
    threads = max(1, cpus // replicas)
    actors = [
        JudgeActor.options(
            num_cpus=cpus / replicas, scheduling_strategy=PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=0)
        ).remote(spec, str(path.parent), threads)
        for _ in range(replicas)
    ]
    rows = arith_pairs(n=chunks * chunk, seed=1)
    samples = [Sample(prompt=r["input"], response=r["output_1"] if i % 2 else r["output_2"]) for i, r in enumerate(rows)]
    work = [[[s] for s in samples[i * chunk : (i + 1) * chunk]] for i in range(chunks)]
    ray.get([a.score_groups.remote(work[0][:1]) for a in actors])  # warm-up: model loaded, first batch run
    reps = [Replica(i) for i in range(replicas)]
    in_flight = [0] * replicas
    running: dict[object, int] = {}
    t0 = time.perf_counter()
    todo = list(work)
    done = 0
    while todo or running:
        while todo and (rep := least_loaded(reps, in_flight, 1)) is not None:
            running[actors[rep.index].score_groups.remote(todo.pop(0))] = rep.index
            in_flight[rep.index] += 1
        ready, _ = ray.wait(list(running), num_returns=1)
        for ref in ready:
            i = running.pop(ref)
            n = sum(1 for g in ray.get(ref) for _ in g)
            in_flight[i] -= 1
            reps[i].items += n
            done += n
    secs = time.perf_counter() - t0
    for a in actors:
        ray.kill(a)
    remove_placement_group(pg)
    return {
        "phase": "judge",
        "judge": judge,
        "replicas": replicas,
        "threads_per_replica": threads,
        "items": done,
        "seconds": round(secs, 2),
        "items_per_s": round(done / secs, 3),
        "items_per_replica": [r.items for r in reps],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--cpus", type=int, default=2)
    ap.add_argument("--judge", default="builtin:pointwise-logprob")
    ap.add_argument("--chunks", type=int, default=12)
    ap.add_argument("--chunk", type=int, default=8, help="samples per judge call")
    ap.add_argument("--skip-train", action="store_true")
    ap.add_argument("--skip-judge", action="store_true")
    args = ap.parse_args()
    print(json.dumps(machine()), flush=True)
    results = []
    if not args.skip_train:
        tmp = Path(tempfile.mkdtemp(prefix="grm-scaling-"))
        try:
            for ranks in (1, 2):
                results.append(train_rate(ranks, args.steps, args.cpus, tmp))
                print(json.dumps(results[-1]), flush=True)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    if not args.skip_judge:
        import ray

        os.environ.setdefault("RAY_AUTH_MODE", "disabled")
        ray.init(num_cpus=args.cpus, object_store_memory=500_000_000, include_dashboard=False, log_to_driver=False)
        try:
            for replicas in (1, 2):
                results.append(judge_rate(replicas, args.judge, args.chunks, args.chunk, args.cpus))
                print(json.dumps(results[-1]), flush=True)
        finally:
            ray.shutdown()
    for phase, key, unit in (("train", "tokens_per_s", "ranks"), ("judge", "items_per_s", "replicas")):
        rates = {r[unit]: r[key] for r in results if r["phase"] == phase}
        if 1 in rates and 2 in rates:
            eff = rates[2] / (2 * rates[1])
            print(
                json.dumps(
                    {
                        "summary": phase,
                        f"{key}_1": rates[1],
                        f"{key}_2": rates[2],
                        "speedup": round(rates[2] / rates[1], 3),
                        "efficiency": round(eff, 3),
                    }
                )
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
