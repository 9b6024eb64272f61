"""Episodes per minute beside answers per minute, one after the other on this machine: `grm run`
of (a) the single-turn pipeline (`pipelines/quickstart.yaml`: SmolLM2 answers arithmetic prompts),
(b) an episode pipeline (`--env calc`: `pipelines/calc-episodes.yaml`, word problems with a
sandboxed calculator; `--env clarify`: `pipelines/clarify-episodes.yaml`, a dialogue with a
scripted user) in lockstep with the environments in the policy's process (`env.turn_wait_s: null`),
and (c) the same episodes with `--workers` environment workers on the judge's pool and the engine
generating for whichever episodes are ready while the others' steps run (`env.turn_wait_s`, the
shipped default unless `--turn-wait`), each with the same policy, one judge (`--judge`; default the
quickstart's cheap log-prob judge, which reads the episode's final answer), the same prompts x
group, tokens a turn, schedule and steps, no rule verifier, and only the final checkpoint.
`--tool-s S` makes every step of every `--slow-every`-th episode take S seconds more
(`benchmarks/envs/slow_steps.py`: an emulated slow tool or model-played user) in both (b) and (c).

Read from each run's metrics.jsonl and samples.jsonl, over the steps after the first (warm-up;
all of them when there is one): samples (episodes) a step, mean policy turns (`env/turns`),
policy tokens a step (the answers' tokens; for episodes the assistant turns' own ids, not the
observations between them), the median seconds of a step, its rollout and its judging, samples a
minute, policy tokens a second of rollout, for episodes the seconds in tools and simulated users
(`Turn.seconds` of each observation): summed over episodes (the work), and as a lockstep would
wait on them (each turn's slowest episode, summed over turns), with that wait's share of the
rollout seconds, and the share of the rollout's episode calls the engine spent generating
(`env/engine_busy`: the rest it sat idle waiting on environments).

    python benchmarks/episode_throughput.py [--steps 2] [--prompts 2] [--group 4] [--max-new-tokens 32]
        [--max-turns 3] [--env calc] [--workers 2] [--turn-wait S] [--tool-s 0] [--slow-every 4]
        [--schedule sync] [--max-staleness 1] [--modes single-turn,episodes,episodes-workers]
        [--judge builtin:helpfulness-pointwise-logprob]
        [--episode-judge builtin:trajectory-pointwise] [--keep] [--json OUT.json]

Prints the machine first, one JSON line per run, a summary line and a markdown table. Run
directories are deleted afterwards (a checkpoint is ~1.6 GB) unless `--keep`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml
from machine import describe, machine  # beside this file

ROOT = Path(__file__).resolve().parents[1]
PIPELINES = {
    "single-turn": "pipelines/quickstart.yaml",
    "calc": "pipelines/calc-episodes.yaml",
    "clarify": "pipelines/clarify-episodes.yaml",
}
MODES = ("single-turn", "episodes", "episodes-workers")
SLOW_ENV = ROOT / "benchmarks" / "envs" / "slow_steps.py"
COLUMNS = [
    ("mode", "mode"),
    ("steps", "steps"),
    ("samples/step", "samples_per_step"),
    ("policy turns", "turns_mean"),
    ("policy tokens/step", "policy_tokens_per_step"),
    ("s/step", "step_s"),
    ("rollout s", "rollout_s"),
    ("judging s", "judging_s"),
    ("samples/min", "samples_per_min"),
    ("all steps s", "all_steps_s"),
    ("samples/min (all steps)", "all_steps_samples_per_min"),
    ("rollout tokens/s", "rollout_tokens_per_s"),
    ("tool s (summed)", "tool_s_per_step"),
    ("tool wait s", "tool_wait_s_per_step"),
    ("tool share of rollout", "tool_share_of_rollout"),
    ("engine busy", "engine_busy"),
]


def pipeline(mode: str, args: argparse.Namespace) -> dict[str, Any]:
    """The shipped pipeline of ``mode`` as a dict, resized to the arguments: one judge (the shipped
    entry's pool and overrides when it ships that judge), no periodic checkpoint."""
    episodes = mode != "single-turn"
    spec = yaml.safe_load((ROOT / PIPELINES[args.env if episodes else mode]).read_text())
    judge = args.episode_judge if episodes and args.episode_judge else args.judge
    shipped = {j["spec"]: j for j in spec["judges"]}
    spec["judges"] = [{**shipped.get(judge, {"spec": judge, "pool": "judge"}), "weight": 1.0}]
    batch = args.prompts * args.group
    spec["name"] = f"bench-{mode}"
    spec["algorithm"].update(prompts_per_step=args.prompts, group_size=args.group)
    spec["rollout"]["max_new_tokens"] = args.max_new_tokens
    spec["train"].update(steps=args.steps, micro_batch_size=math.gcd(batch, spec["train"]["micro_batch_size"]))
    spec["schedule"] = {**spec.get("schedule", {}), "mode": args.schedule}
    if args.schedule == "async":
        spec["schedule"]["max_staleness"] = args.max_staleness
    spec["checkpoint"] = {"every": 0, "keep": 1, "export": False}  # timed: the run, not the model export after it
    if episodes:
        env = spec["env"]
        env["max_turns"] = args.max_turns
        if args.tool_s > 0:
            shipped = env.pop("type")
            env.update(type="python", path=f"{SLOW_ENV}:SlowSteps")
            env["kwargs"] = {**env.get("kwargs", {}), "env": shipped, "seconds": args.tool_s, "every": args.slow_every}
        if mode == "episodes":
            env["turn_wait_s"] = None
        else:
            env.update(pool=spec["judges"][0].get("pool") or "judge", workers=args.workers)
            if args.turn_wait is not None:
                env["turn_wait_s"] = args.turn_wait
    return spec


def sample_facts(row: dict[str, Any]) -> dict[str, Any]:
    """What one samples.jsonl line adds: its step, and for an episode the policy's tokens and the
    observation seconds after each of its assistant turns."""
    t = row.get("trajectory")
    if t is None:
        return {"step": row["step"], "tokens": None, "waits": []}
    tokens, waits = 0, []
    for turn in t["turns"]:
        if turn["role"] == "assistant":
            tokens += len(turn["token_ids"])
            waits.append(0.0)
        elif waits:
            waits[-1] += float(turn.get("seconds") or 0.0)
    return {"step": row["step"], "tokens": tokens, "waits": waits}


def summarise(mode: str, metrics: list[dict[str, Any]], facts: list[dict[str, Any]]) -> dict[str, Any]:
    """One table row from a run's metrics lines and its samples' facts (see the module docstring)."""
    measured = [m for m in metrics if m["step"] > 1] or metrics
    per_step = []
    for m in measured:
        fs = [f for f in facts if f["step"] == m["step"]]
        episodes = bool(fs) and fs[0]["tokens"] is not None
        tokens = sum(f["tokens"] for f in fs) if episodes else m["response_len_mean"] * len(fs)
        turns = max((len(f["waits"]) for f in fs), default=0)
        wait = sum(max((f["waits"][k] for f in fs if len(f["waits"]) > k), default=0.0) for k in range(turns))
        per_step.append(
            {
                "samples": len(fs),
                "tokens": tokens,
                "tool_s": sum(sum(f["waits"]) for f in fs) if episodes else None,
                "wait_s": wait if episodes else None,
            }
        )

    def med(key: str) -> float:
        return statistics.median(m[key] for m in measured)

    rollout = sum(m["seconds_rollout"] for m in measured)
    samples, step_s = statistics.median(p["samples"] for p in per_step), med("seconds_step")
    episodes = per_step[0]["tool_s"] is not None
    row: dict[str, Any] = {
        "mode": mode,
        "steps": len(metrics),
        "measured_steps": len(measured),
        "samples_per_step": samples,
        "turns_mean": round(statistics.fmean(m.get("env/turns", 1.0) for m in measured), 2),
        "policy_tokens_per_step": round(float(statistics.median(p["tokens"] for p in per_step)), 1),
        "step_s": round(step_s, 2),
        "rollout_s": round(med("seconds_rollout"), 2),
        "judging_s": round(med("seconds_judging"), 2),
        "samples_per_min": round(samples * 60 / step_s, 2) if step_s else None,
        "rollout_tokens_per_s": round(sum(p["tokens"] for p in per_step) / rollout, 1) if rollout else None,
        "tool_s_per_step": round(statistics.median(p["tool_s"] for p in per_step), 3) if episodes else None,
        "tool_wait_s_per_step": round(statistics.median(p["wait_s"] for p in per_step), 3) if episodes else None,
        "tool_share_of_rollout": round(sum(p["wait_s"] for p in per_step) / rollout, 3) if episodes and rollout else None,
    }
    # every step's seconds, the first included: in async mode the median hides the rollouts done
    # ahead (the last steps find theirs ready), while all the steps together did all the work
    total_s = sum(m["seconds_step"] for m in metrics)
    row["all_steps_s"] = round(total_s, 1)
    row["all_steps_samples_per_min"] = round(len(facts) * 60 / total_s, 2) if total_s else None
    if "env/engine_busy" in measured[0]:
        row["engine_busy"] = round(statistics.fmean(m["env/engine_busy"] for m in measured), 3)
    if "env/success" in measured[0]:
        row["env_success"] = round(statistics.fmean(m.get("env/success", 0.0) for m in measured), 3)
    return row


def run(mode: str, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    """``grm run`` of ``mode``'s pipeline in ``tmp``; its row, with the command's wall seconds."""
    cfg, out = tmp / f"{mode}.yaml", tmp / mode
    cfg.write_text(yaml.safe_dump(pipeline(mode, args), sort_keys=False))
    cmd = [sys.executable, "-m", "grm", "run", str(cfg), f"out_dir={out}", "--no-live"]
    env = {"RAY_AUTH_MODE": "disabled", "HF_HUB_OFFLINE": "1", **os.environ}
    t0 = time.perf_counter()
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(f"grm run failed ({mode}, exit {r.returncode}; {cfg}):\n{(r.stdout + r.stderr)[-3000:]}")
    return {**read_run(mode, out), "schedule": args.schedule, "run_s": round(wall, 1), "out_dir": str(out)}


def read_run(mode: str, out: Path) -> dict[str, Any]:
    """The table row of the run directory ``out`` (``--summarise``: of a kept one)."""
    metrics = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if x.strip()]
    with (out / "samples.jsonl").open() as f:  # one line at a time: episodes carry every token id
        facts = [sample_facts(json.loads(x)) for x in f if x.strip()]
    if not metrics:
        raise SystemExit(f"{out / 'metrics.jsonl'}: no step was logged")
    return summarise(mode, metrics, facts)


def table(rows: list[dict[str, Any]]) -> str:
    """The rows as a markdown table (``n/a`` where a column does not apply)."""
    lines = ["| " + " | ".join(h for h, _ in COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in rows:
        lines.append("| " + " | ".join("n/a" if r.get(k) is None else str(r[k]) for _, k in COLUMNS) + " |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=2, help="training steps of each run (the first is warm-up)")
    ap.add_argument("--prompts", type=int, default=2, help="prompts a step")
    ap.add_argument("--group", type=int, default=4, help="answers (episodes) a prompt")
    ap.add_argument("--max-new-tokens", type=int, default=32, help="tokens an answer (an episode's turn) may have")
    ap.add_argument("--max-turns", type=int, default=3, help="policy turns an episode may have")
    ap.add_argument("--env", choices=("calc", "clarify"), default="calc", help="the episodes' shipped environment")
    ap.add_argument("--workers", type=int, default=2, help="environment workers of the third run")
    ap.add_argument("--turn-wait", type=float, help="env.turn_wait_s of the third run (default: the shipped one)")
    ap.add_argument("--tool-s", type=float, default=0.0, help="seconds more for every step of the slow episodes")
    ap.add_argument("--slow-every", type=int, default=4, help="every N-th episode (by row seed) is slow")
    ap.add_argument("--schedule", choices=("sync", "async"), default="sync", help="schedule.mode of every run")
    ap.add_argument("--max-staleness", type=int, default=1, help="schedule.max_staleness of async runs")
    ap.add_argument("--judge", default="builtin:helpfulness-pointwise-logprob", help="the judge of both runs")
    ap.add_argument("--episode-judge", help="the episodes' judge instead (e.g. builtin:trajectory-pointwise)")
    ap.add_argument("--modes", default=",".join(MODES), help=f"which runs, comma-separated (of {', '.join(MODES)})")
    ap.add_argument(
        "--summarise", nargs="+", metavar="LABEL=RUN_DIR", help="print the rows of kept run directories (no new runs)"
    )
    ap.add_argument("--keep", action="store_true", help="keep the run directories (checkpoints included)")
    ap.add_argument("--json", type=Path, metavar="OUT", help="write the machine, the arguments and the rows here")
    args = ap.parse_args()
    for name in ("steps", "prompts", "group", "max_new_tokens", "max_turns", "workers", "slow_every"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.summarise:
        given = [x.partition("=") for x in args.summarise]
        rows = [read_run(label, Path(path)) for label, _, path in given]
        for r in rows:
            print(json.dumps(r), flush=True)
        print(table(rows))
        return 0
    modes = [m for m in args.modes.split(",") if m]
    if not modes or any(m not in MODES for m in modes):
        ap.error(f"--modes: comma-separated names of {', '.join(MODES)}, got {args.modes!r}")
    facts = machine()
    print(json.dumps(facts), flush=True)
    print(f"# {describe(facts)}", flush=True)
    tmp = Path(tempfile.mkdtemp(prefix="grm-episode-throughput-"))
    rows = []
    try:
        for mode in modes:
            rows.append(run(mode, args, tmp))
            print(json.dumps(rows[-1]), flush=True)
    finally:
        if args.keep:
            print(f"# run directories kept in {tmp}", flush=True)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        given = {k: str(v) for k, v in vars(args).items()}
        args.json.write_text(json.dumps({"machine": facts, "args": given, "rows": rows}, indent=1))
    print(table(rows))
    if len(rows) < len(MODES):
        return 0
    single, lockstep, workers = rows

    def ratio(a: dict[str, Any], b: dict[str, Any]) -> float | None:
        return round(a["samples_per_min"] / b["samples_per_min"], 3) if b["samples_per_min"] else None

    print(
        json.dumps(
            {
                "summary": "episodes vs single-turn",
                "answers_per_min": single["samples_per_min"],
                "episodes_per_min_lockstep": lockstep["samples_per_min"],
                "episodes_per_min_workers": workers["samples_per_min"],
                "lockstep_vs_single": ratio(lockstep, single),
                "workers_vs_single": ratio(workers, single),
                "workers_vs_lockstep": ratio(workers, lockstep),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
