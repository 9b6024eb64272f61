"""Soak: a long `grm eval` and a long `grm run` with the resident memory of every process they
start (the command and its children: Ray's GCS, raylet and actors) sampled every few seconds.

Prints JSON lines: the machine, then per phase the RSS after warm-up and at the end (growth %),
items or samples expected / written / unique (lost and duplicated), and the disk used.

    python benchmarks/soak.py [--items 1000] [--steps 50] [--judge builtin:pairwise-logprob]
        [--pipeline builtin:arith-verifier] [--skip-eval] [--skip-run] [--every 5]

Eval data: ``arith_pairs(n=items)`` written to a temp JSONL (generated, nothing copied). Warm-up
ends when the first results line (eval) or the second step (run) is on disk: model loading and
the first batches' allocator growth are not a leak.
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

import psutil
from machine import machine  # beside this file

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")


def tree_rss(pid: int) -> int:
    """Resident bytes of ``pid`` and every descendant (Ray's processes are the driver's children)."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0
    total = 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total


def lines(path: Path) -> list[dict]:
    if not path.exists():
        return []
    out = []
    for x in path.read_text().splitlines():
        try:
            out.append(json.loads(x))
        except json.JSONDecodeError:  # a line being written right now
            pass
    return out


def watch(cmd: list[str], warm: callable, every: float) -> tuple[int, list[tuple[float, int, bool]], float]:
    """Run ``cmd``; sample (seconds, tree RSS, warmed up) every ``every`` s. Returns (exit code, samples, seconds)."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    samples = []
    while p.poll() is None:
        samples.append((time.perf_counter() - t0, tree_rss(p.pid), warm()))
        time.sleep(every)
    err = p.stderr.read() if p.stderr else ""
    if p.returncode != 0:
        print(err[-3000:], file=sys.stderr)
    return p.returncode, samples, time.perf_counter() - t0


def rss_summary(samples: list[tuple[float, int, bool]]) -> dict:
    warm = [s for s in samples if s[2]]
    if len(warm) < 2:
        return {"rss_samples": len(samples), "warm_samples": len(warm)}
    start, end, peak = warm[0][1], warm[-1][1], max(s[1] for s in samples)
    return {
        "rss_samples": len(samples),
        "warm_samples": len(warm),
        "rss_warm_start_mb": round(start / 2**20),
        "rss_end_mb": round(end / 2**20),
        "rss_peak_mb": round(peak / 2**20),
        "rss_growth_pct": round(100 * (end - start) / start, 2),
        "warm_span_s": round(warm[-1][0] - warm[0][0], 1),
        # RSS at each quarter of the warm span: a leak keeps climbing, an allocator's high-water
        # mark (larger batches later in the data) steps up and stays
        "rss_quarters_mb": [round(warm[min(len(warm) - 1, len(warm) * q // 4)][1] / 2**20) for q in range(5)],
        "rss_growth_second_half_pct": round(100 * (end - warm[len(warm) // 2][1]) / warm[len(warm) // 2][1], 2),
    }


def du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def soak_eval(tmp: Path, items: int, judge: str, every: float) -> dict:
    from grm.data.builtin import arith_pairs

    data = tmp / "pairs.jsonl"
    rows = arith_pairs(n=items, seed=1)
    data.write_text("".join(json.dumps({**r, "id": f"soak-{i}"}) + "\n" for i, r in enumerate(rows)))
    out = tmp / "eval"
    results = out / "results.jsonl"
    cmd = [sys.executable, "-m", "grm", "eval", judge, "--data", str(data), "--out", str(out)]
    rc, samples, secs = watch(cmd, lambda: results.exists() and results.stat().st_size > 0, every)
    got = lines(results)
    ids = [(r.get("judge"), r.get("item_id")) for r in got]
    return {
        "phase": "eval",
        "judge": judge,
        "exit": rc,
        "seconds": round(secs, 1),
        "items": items,
        "written": len(got),
        "unique": len(set(ids)),
        "lost": items - len(set(ids)),
        "duplicated": len(ids) - len(set(ids)),
        "disk_mb": round(du(out) / 2**20, 1),
        **rss_summary(samples),
    }


def soak_run(tmp: Path, pipeline: str, steps: int, every: float, overrides: list[str]) -> dict:
    out = tmp / "run"
    no_export = "checkpoint.export=false"  # timed, its disk measured: the run, not the model export after it
    cmd = [sys.executable, "-m", "grm", "run", pipeline, f"train.steps={steps}", f"out_dir={out}", no_export, *overrides]
    metrics = out / "metrics.jsonl"
    rc, samples, secs = watch(cmd, lambda: len(lines(metrics)) >= 2, every)
    ms, rows = lines(metrics), lines(out / "samples.jsonl")
    cfg = {}
    resolved = out / "config.resolved.yaml"
    if resolved.exists():
        import yaml

        cfg = yaml.safe_load(resolved.read_text())
    per_step = cfg["algorithm"]["prompts_per_step"] * cfg["algorithm"]["group_size"] if cfg else 0
    ids = [r["id"] for r in rows]
    res = {
        "phase": "run",
        "pipeline": pipeline,
        "exit": rc,
        "seconds": round(secs, 1),
        "steps": steps,
        "steps_logged": len(ms),
        "samples_expected": steps * per_step,
        "samples_written": len(rows),
        "lost": steps * per_step - len(set(ids)),
        "duplicated": len(ids) - len(set(ids)),
        "masked": sum(m.get("masked", 0) for m in ms),
        "seconds_step_median": sorted(m["seconds_step"] for m in ms)[len(ms) // 2] if ms else None,
        "disk_mb": round(du(out) / 2**20, 1),
        "disk_checkpoints_mb": round(du(out / "checkpoints") / 2**20, 1) if (out / "checkpoints").exists() else 0,
        **rss_summary(samples),
    }
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--items", type=int, default=1000)
    ap.add_argument("--judge", default="builtin:pairwise-logprob")
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--pipeline", default="builtin:arith-verifier")
    ap.add_argument("--every", type=float, default=5.0, help="seconds between RSS samples")
    ap.add_argument("--skip-eval", action="store_true")
    ap.add_argument("--skip-run", action="store_true")
    ap.add_argument("--keep", action="store_true", help="keep the eval and run directories")
    ap.add_argument("overrides", nargs="*", help="pipeline overrides, e.g. checkpoint.every=10")
    args = ap.parse_args()
    print(json.dumps(machine()), flush=True)
    tmp = Path(tempfile.mkdtemp(prefix="grm-soak-"))
    try:
        if not args.skip_eval:
            print(json.dumps(soak_eval(tmp, args.items, args.judge, args.every)), flush=True)
        if not args.skip_run:
            print(json.dumps(soak_run(tmp, args.pipeline, args.steps, args.every, args.overrides)), flush=True)
    finally:
        if args.keep:
            print(json.dumps({"kept": str(tmp)}))
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
