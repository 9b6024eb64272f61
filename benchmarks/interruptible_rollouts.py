"""Interruptible rollouts against the async step they replace (#44 item 3), on a workload with
long-tailed response lengths, one invocation, systems side by side.

The policy rolls out on a served engine: the SGLang stand-in (``tests/serving/sglang_standin.py``,
SGLang's HTTP API over transformers, one thread), as a GPU run would on SGLang servers; the trainer
trains in its Ray actor on the other core. Weights reach the server by broadcast over gloo after
every step. The workload: arithmetic questions, every tenth one asking for a long, detailed answer
(those run to ``--max-new-tokens``), in a fixed order, so each system sees the same prompts at the
same steps; the reward is the numeric-answer rule (its cost is nil, so the policy's phases are the
step).

Systems (``--systems``; each a fresh ``grm run`` of ``--steps`` steps against the one server,
whose weights are put back to the base model before each run):
- ``sync``: strictly on-policy;
- ``async-1``: ``schedule: {mode: async, max_staleness: 1}``, today's async step: a sync waits
  for the rollout call under way;
- ``interruptible-1``, ``interruptible-2``: ``interruptible: true`` with η = 1 or 2: rollouts run
  on the server beside training, and a sync cuts the generations in flight, which go on with the
  new weights.

Printed: the machine, then per system the median and range of ``seconds_step`` over the steps
after ``--warmup`` of all its runs (``--repeats``, the systems alternating) and each run's median,
the ratio to ``async-1``'s median, the mean reward, the share of tokens by version lag and of
responses spanning versions, and the median run's wall seconds. Run directories go
under a temporary directory, deleted after (a checkpoint is ~1 GB).

    python benchmarks/interruptible_rollouts.py --steps 10
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from machine import describe, machine  # beside this file

ROOT = Path(__file__).resolve().parents[1]
STANDIN = ROOT / "tests" / "serving" / "sglang_standin.py"
MODEL = "smollm2-135m-instruct"
SYSTEMS = {
    "sync": {"mode": "sync"},
    "async-1": {"mode": "async", "max_staleness": 1},
    "interruptible-1": {"mode": "async", "max_staleness": 1, "interruptible": True},
    "interruptible-2": {"mode": "async", "max_staleness": 2, "interruptible": True},
}
LONG = (
    "Explain in great detail, step by step, how to add {a} and {b} by hand: carrying, place value, "
    "checking the result, and three worked examples of similar sums."
)
SHORT = "What is {a} + {b}? Answer with the number."


def workload(n: int) -> list[dict]:
    """``n`` prompts, every tenth (index 9, 19, ...) asking for a long answer."""
    rows = []
    for i in range(n):
        a, b = 17 + 7 * i % 83, 25 + 13 * i % 71
        text = (LONG if i % 10 == 9 else SHORT).format(a=a, b=b)
        rows.append({"id": f"q{i}", "prompt": text, "reference": str(a + b)})
    return rows


def pipeline(data: Path, url: str, schedule: dict, steps: int, max_new: int) -> str:
    sched = json.dumps(schedule)
    return f"""name: interruptible-bench
seed: 0
pools: {{train: {{cpus: 1}}}}
policy:
  spec: builtin:{MODEL}
  pool: train
  overrides: ['engine={{type: sglang, urls: ["{url}"], weight_sync: broadcast}}']
judges:
  - {{spec: builtin:numeric-answer}}
data: {{prompts: {data}, shuffle: false}}
algorithm: {{type: grpo, group_size: 4, prompts_per_step: 4}}
rollout: {{max_new_tokens: {max_new}, temperature: 0.7}}
train: {{steps: {steps}, lr: 1.0e-5, micro_batch_size: 4, backend: {{type: torch}}}}
schedule: {sched}
checkpoint: {{every: 0, keep: 1, export: false}}
"""


def post(url: str, body: dict) -> dict:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def start_server(port: int, log: Path) -> subprocess.Popen:
    from grm.models import resolve_model

    cmd = [sys.executable, str(STANDIN), "--model-path", resolve_model(MODEL), "--port", str(port), "--threads", "1"]
    proc = subprocess.Popen(cmd, stdout=log.open("w"), stderr=subprocess.STDOUT, env={**os.environ, "OMP_NUM_THREADS": "1"})
    deadline = time.time() + 300
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5):
                return proc
        except OSError:
            if proc.poll() is not None:
                raise SystemExit(f"the stand-in server exited: {log.read_text()[-2000:]}") from None
            time.sleep(1)
    proc.kill()
    raise SystemExit("the stand-in server did not start in 300 s")


def run_system(name: str, schedule: dict, url: str, tmp: Path, data: Path, steps: int, max_new: int) -> list[dict]:
    from grm.models import resolve_model

    post(url + "/continue_generation", {})
    post(url + "/update_weights_from_disk", {"model_path": resolve_model(MODEL), "weight_version": "default"})
    spec = tmp / f"{name}.yaml"
    spec.write_text(pipeline(data, url, schedule, steps, max_new))
    out = tmp / f"run-{name}"
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    t0 = time.perf_counter()
    r = subprocess.run(
        [sys.executable, "-m", "grm", "run", str(spec), f"out_dir={out}"], capture_output=True, text=True, env=env, cwd=ROOT
    )
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(f"{name}: grm run failed ({r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}")
    ms = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if x.strip()]
    for m in ms:
        m["_wall"] = wall
    import shutil

    shutil.rmtree(out, ignore_errors=True)
    return ms


def tokens_by_lag(metrics: list[dict]) -> dict[str, float]:
    """The share of sampled tokens by version lag (``rollout/tokens_lag_K``), averaged over the
    steps' metrics lines, by K (rounded to 3 places)."""
    lags: dict[str, float] = {}
    for m in metrics:
        for k, v in m.items():
            if k.startswith("rollout/tokens_lag_"):
                lags[k.rsplit("_", 1)[1]] = lags.get(k.rsplit("_", 1)[1], 0.0) + v / len(metrics)
    return {k: round(v, 3) for k, v in sorted(lags.items())}


def summary(name: str, runs: list[list[dict]], warmup: int) -> dict:
    """One system's row over its runs (repeats): the step seconds after ``warmup`` of every run
    pooled (median, min, max) and each run's median; means over every step of every run."""
    steady = [m["seconds_step"] for ms in runs for m in ms[warmup:]]
    every = [m for ms in runs for m in ms]
    return {
        "system": name,
        "median_step_s": statistics.median(steady),
        "min_step_s": min(steady),
        "max_step_s": max(steady),
        "run_medians": [round(statistics.median(m["seconds_step"] for m in ms[warmup:]), 1) for ms in runs],
        "reward_mean": statistics.mean(m["reward_mean"] for m in every),
        "response_len_mean": statistics.mean(m["response_len_mean"] for m in every),
        "tokens_by_lag": tokens_by_lag(every),
        "spanning_versions": statistics.mean(m.get("rollout/spanning_versions", 0.0) for m in every),
        "wall_s": statistics.median(ms[0]["_wall"] for ms in runs),
        "steps": len(every),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2, help="first steps left out of the medians")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--systems", default="sync,async-1,interruptible-1,interruptible-2")
    ap.add_argument("--repeats", type=int, default=1, help="runs of each system, the systems alternating")
    ap.add_argument("--out", type=Path, default=None, help="also write the rows as JSON here")
    args = ap.parse_args()
    names = [s for s in args.systems.split(",") if s]
    unknown = [s for s in names if s not in SYSTEMS]
    if unknown or args.steps <= args.warmup or args.warmup < 0 or args.max_new_tokens < 1 or args.repeats < 1:
        ap.error(f"systems are {', '.join(SYSTEMS)}" if unknown else "steps must exceed warmup >= 0; repeats >= 1")
    facts = machine()
    print(json.dumps(facts), flush=True)
    print(f"# {describe(facts)}", flush=True)
    from grm.process import free_port

    rows = []
    with tempfile.TemporaryDirectory(prefix="interruptible-") as tmp_s:
        tmp = Path(tmp_s)
        data = tmp / "prompts.jsonl"
        data.write_text("".join(json.dumps(r) + "\n" for r in workload(4 * args.steps + 8)))
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        server = start_server(port, tmp / "standin.log")
        try:
            runs: dict[str, list[list[dict]]] = {name: [] for name in names}
            for rep in range(args.repeats):
                for name in names:
                    runs[name].append(run_system(name, SYSTEMS[name], url, tmp, data, args.steps, args.max_new_tokens))
                    print(json.dumps({"repeat": rep, "system": name, "steps_s": [m["seconds_step"] for m in runs[name][-1]]}))
            for name in names:
                rows.append(summary(name, runs[name], args.warmup))
                print(json.dumps(rows[-1]), flush=True)
        finally:
            server.kill()
            server.wait()
    base = next((r["median_step_s"] for r in rows if r["system"] == "async-1"), None)
    print()
    print(
        "| system | step s, median [min, max] | each run's median | vs async-1 | reward | tokens/response "
        "| tokens by lag | spanning | wall s |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        ratio = f"{r['median_step_s'] / base:.2f}x" if base else "-"
        lag = ", ".join(f"{k}: {v:.2f}" for k, v in r["tokens_by_lag"].items())
        print(
            f"| {r['system']} | {r['median_step_s']:.1f} [{r['min_step_s']:.1f}, {r['max_step_s']:.1f}] "
            f"| {', '.join(f'{x:.1f}' for x in r['run_medians'])} | {ratio} "
            f"| {r['reward_mean']:.3f} | {r['response_len_mean']:.0f} | {lag} | {r['spanning_versions']:.2f} "
            f"| {r['wall_s']:.0f} |"
        )
    if args.out is not None:
        args.out.write_text(json.dumps({"machine": facts, "args": vars(args) | {"out": str(args.out)}, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
