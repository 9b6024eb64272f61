"""Does a GRM-only trajectory reward teach multi-turn tool use that shows on held-out tasks? (#41)

Trains SmolLM2 on the episodes of one shipped environment (``--env calc``: word problems with a
sandboxed calculator, ``pipelines/calc-episodes.yaml``; ``--env clarify``: a dialogue with a scripted
user who gives the missing detail only when asked, ``pipelines/clarify-episodes.yaml``; ``--env revise``,
the default: a scripted user asks for a piece of writing, then for a rewrite that includes a given
word, ``pipelines/revise-episodes.yaml``), with one
reward per system, everything else as shipped:
- ``grm``: the GRM judge alone (``--judge``, default the env pipeline's first judge, with
  ``--judge-model``), which reads the whole episode and never sees the environment's success signal;
- ``length``: ``builtin:length-longer`` alone (words of the final answer: the hacking control; if
  it gains, length explains the GRM's gain too);
- ``verifier``: ``builtin:env-success`` alone (the environment's own success signal: the upper bound).
Each system's pipeline YAML is written under --out; the run is extended ``--eval-every`` steps at a
time (``grm run ... --resume``; the LR is constant, so the segments are one run), and after each
segment its checkpoint runs the environment's held-out split (tasks disjoint from training) with
``grm eval --policy RUN --env ENV.yaml --split heldout`` (greedy): the rule-checked success rate
with its 95% Wilson interval. The initial policy is evaluated once. The last segment is evaluated
``--against`` the initial policy on the same tasks: the paired success gain with its 95% bootstrap
interval, per system, and the GRM gain minus the length gain.

Prints the machine, a table of held-out success by step, a final-vs-initial table, the verdict
("target >= 10 points with the CI excluding 0") and train minutes per system; writes
``episode_learning.json`` and ``episode_learning.png`` under --out. Every number comes from the eval
directories' ``summary.json``; a stopped invocation resumes (runs and evals are resumable).
``--dry-run`` prints the pipeline YAMLs and the commands still to run, and runs nothing.

    python benchmarks/episode_learning.py --env revise --steps 20 --eval-every 10 --heldout 100
    python benchmarks/episode_learning.py --env clarify --steps 60 --eval-every 20 --heldout 100 \
        --judge builtin:trajectory-pointwise
    python benchmarks/episode_learning.py --env calc --systems grm,length,verifier train.lr=1e-5 --dry-run
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

import yaml
from learning_curve import _ci, _pct, grm, latest_step, plot  # beside this file
from machine import describe, machine

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
ROOT = Path(__file__).resolve().parents[1]
PIPELINES = {env: ROOT / "pipelines" / f"{env}-episodes.yaml" for env in ("revise", "calc", "clarify")}
CONTROLS = {"length": "builtin:length-longer", "verifier": "builtin:env-success"}
SYSTEMS = ("grm", "length", "verifier")
TARGET = 0.10
"""The gain #41 asks of the GRM-only reward: 10 points of held-out success, its CI excluding 0."""


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--env", choices=tuple(PIPELINES), default="revise", help="the shipped episode pipeline")
    ap.add_argument("--systems", default="grm,length", help="comma list of: " + ", ".join(SYSTEMS))
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--eval-every", type=int, default=20)
    ap.add_argument("--heldout", type=int, default=100, help="held-out tasks evaluated (the split's first N)")
    ap.add_argument("--max-new-tokens", type=int, help="tokens a turn, in training and eval (default: the pipeline's)")
    ap.add_argument("--judge", default=None, help="the grm system's judge (default: the env pipeline's first)")
    ap.add_argument("--judge-model", default="qwen2.5-coder-1.5b-instruct", help="the grm system's judge model")
    ap.add_argument("--judge-dtype", default="auto", help="the judge's engine dtype (auto: bf16 where the CPU has it)")
    ap.add_argument(
        "--judge-overrides", action="append", default=[], metavar="KEY=VALUE", help="more judge overrides (repeatable)"
    )
    ap.add_argument("--out", default=None, help="default bench-out/episode-learning-ENV")
    ap.add_argument("--dry-run", action="store_true", help="print the pipeline YAMLs and commands; run nothing")
    ap.add_argument("overrides", nargs="*", help="pipeline overrides for every grm run, e.g. train.lr=1e-5")
    args = ap.parse_args()
    args.systems = args.systems.split(",")
    args.out = args.out or f"bench-out/episode-learning-{args.env}"
    args.judge = args.judge or yaml.safe_load(PIPELINES[args.env].read_text())["judges"][0]["spec"]
    if bad := [s for s in args.systems if s not in SYSTEMS]:
        ap.error(f"unknown system(s) {bad}; choose from {list(SYSTEMS)}")
    if min(args.steps, args.eval_every, args.heldout, args.max_new_tokens or 1) < 1:
        ap.error("--steps, --eval-every, --heldout and --max-new-tokens must be at least 1")
    if args.steps % args.eval_every:
        ap.error("--steps must be a multiple of --eval-every")
    from grm.config.loading import ConfigError

    try:
        args.resolved = resolved(pipeline("grm", args), args.overrides)
    except ConfigError as e:  # a bad KEY=VALUE: refused before anything runs
        ap.error(str(e))
    return args


def pipeline(system: str, args: argparse.Namespace) -> dict[str, Any]:
    """The env's shipped pipeline as a dict with ``system``'s judge as the only one; pools, env,
    algorithm and schedule as shipped (the controls leave the judge pool idle)."""
    spec = yaml.safe_load(PIPELINES[args.env].read_text())
    if system == "grm":
        shipped = {j["spec"]: j for j in spec["judges"]}
        judge = dict(shipped.get(args.judge, {"spec": args.judge, "pool": "judge"}))
        judge["overrides"] = [
            *judge.get("overrides", []),
            f"model={args.judge_model}",
            f"engine.dtype={args.judge_dtype}",
            *args.judge_overrides,
        ]
    else:
        judge = {"spec": CONTROLS[system]}  # a rule: runs in the driver
    spec["judges"] = [{**judge, "weight": 1.0}]
    spec["name"] = f"{args.env}-episodes-{system}"
    if args.max_new_tokens:
        spec["rollout"]["max_new_tokens"] = args.max_new_tokens
    return spec


def resolved(spec: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """``spec`` with the command line's overrides applied, as ``grm run`` will see it: the initial
    policy, the env block and the turn length the held-out evals must share with training."""
    from grm.config.loading import Located, apply_overrides
    from grm.config.pipeline import PipelineSpec

    return apply_overrides(Located(copy.deepcopy(spec), Path("<overrides>")), overrides, PipelineSpec).data


def put(path: Path, text: str, args: argparse.Namespace) -> None:
    if args.dry_run:
        print(f"\n# {path}\n{text}", flush=True)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def call(args: argparse.Namespace, *argv: str) -> None:
    if args.dry_run:
        print("$", " ".join([sys.executable, "-m", "grm", *argv]), flush=True)
    else:
        grm(*argv)


def evaluate(policy: str, out: Path, args: argparse.Namespace, against: str | None = None) -> dict | None:
    """``policy``'s held-out episodes (and ``against``'s, paired); the summary (None in a dry run)."""
    if (out / "summary.json").exists():  # evaluated in an earlier invocation (its checkpoint may since be replaced)
        return json.loads((out / "summary.json").read_text())
    tasks = ["--env", str(args.env_file), "--split", "heldout", "--limit", str(args.heldout)]
    turn = ["--max-new-tokens", str(args.resolved["rollout"]["max_new_tokens"])]
    paired = ["--against", against] if against else []
    call(args, "eval", "--policy", policy, *tasks, *turn, "--out", str(out), *paired)
    return None if args.dry_run else json.loads((out / "summary.json").read_text())


def train_to(system: str, steps: int, args: argparse.Namespace) -> float:
    """Extend ``system``'s run to ``steps`` (nothing when its checkpoint is there); the seconds it took."""
    run = args.out / system / "run"
    if latest_step(run) >= steps:
        return 0.0
    resume = ["--resume", str(run)] if steps > args.eval_every or (run / "config.resolved.yaml").exists() else []
    t = time.time()
    call(
        args,
        "run",
        str(args.out / system / "pipeline.yaml"),
        f"out_dir={run}",
        f"train.steps={steps}",
        f"checkpoint.every={args.eval_every}",
        "checkpoint.keep=1",
        "checkpoint.export=false",  # evals read the checkpoints; each segment would export again
        *args.overrides,
        *resume,
    )
    return time.time() - t


def point(step: int, summary: dict, side: str = "policy") -> dict[str, Any]:
    s = summary["sides"][side]
    return {
        "step": step,
        "success": s["success"]["rate"],
        "ci95": s["success"]["ci95"],
        "successes": s["success"]["successes"],
        "decided": s["success"]["n"],
        "no_signal": s["success"]["masked"],
        "turns": s["turns"]["mean"],
        "tokens": s["generated_tokens"]["mean"],
    }


def final(summary: dict, minutes: float) -> dict[str, Any]:
    """Final vs initial on the same tasks: the paired success gain, its CI and whether it excludes 0."""
    c = summary["comparison"]["success"]
    lo, hi = c["ci95"]
    tokens = [summary["sides"][s]["generated_tokens"]["mean"] for s in ("policy", "other")]
    return {
        "initial": summary["sides"]["other"]["success"]["rate"],
        "final": summary["sides"]["policy"]["success"]["rate"],
        "gain": c["mean"],
        "gain_ci95": c["ci95"],
        "tasks": c["n"],
        "ci_excludes_0": lo is not None and hi is not None and (lo > 0 or hi < 0),
        "only_final": c["policy_only"],
        "only_initial": c["other_only"],
        "turns_change": summary["comparison"]["turns"]["mean"],
        "tokens_change": None if None in tokens else tokens[0] - tokens[1],
        "train_minutes": minutes,
    }


def run_system(system: str, initial: str, args: argparse.Namespace) -> tuple[list[dict], dict | None, float]:
    """Train ``system`` segment by segment, evaluating each checkpoint before the next replaces it;
    its curve (without step 0), the final-vs-initial summary and its train minutes."""
    put(args.out / system / "pipeline.yaml", yaml.safe_dump(pipeline(system, args), sort_keys=False), args)
    timing = args.out / system / "train_seconds.json"  # per segment, kept across invocations
    seconds: dict[str, float] = json.loads(timing.read_text()) if timing.exists() else {}
    curve, last = [], None
    run = str(args.out / system / "run")
    for steps in range(args.eval_every, args.steps + 1, args.eval_every):
        took = train_to(system, steps, args)
        if took and not args.dry_run:
            seconds[str(steps)] = took
            timing.write_text(json.dumps(seconds))
        paired = args.out / system / f"final-vs-initial-step{steps}"  # a longer invocation compares its own final
        if steps == args.steps or (paired / "summary.json").exists():
            last = evaluate(run, paired, args, against=initial)
        else:
            last = evaluate(run, args.out / system / f"eval-step{steps}", args)
        if last is not None:
            curve.append(point(steps, last))
    return curve, last, sum(seconds.values()) / 60


def main() -> int:
    args = parse_args()
    args.out = Path(args.out).resolve()
    args.env_file = args.out / "env.yaml"  # every eval's episodes: the env block training uses
    t0 = time.time()
    facts = None
    if not args.dry_run:
        facts = machine()
        print(json.dumps(facts), flush=True)
        print(f"cpu: {describe(facts)}; torch threads: {os.environ.get('OMP_NUM_THREADS', 'default')}", flush=True)
    put(args.env_file, yaml.safe_dump({"env": args.resolved["env"]}, sort_keys=False), args)
    initial_ref = args.resolved["policy"]["spec"]
    initial = evaluate(initial_ref, args.out / "initial", args)
    curves: dict[str, list[dict]] = {}
    finals: dict[str, dict] = {}
    for system in args.systems:
        curve, last, minutes = run_system(system, initial_ref, args)
        if initial is not None and last is not None:
            curves[system] = [point(0, initial), *curve]
            finals[system] = final(last, minutes)
    if args.dry_run:
        return 0
    result: dict[str, Any] = {
        "cpu": describe(facts),
        "env": args.env,
        "steps": args.steps,
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items() if k != "resolved"},
        "pipeline": args.resolved,  # the grm system's, with the overrides: env, policy, algorithm as run
        "curves": curves,
        "finals": finals,
        "grm_minus_length": finals["grm"]["gain"] - finals["length"]["gain"] if {"grm", "length"} <= finals.keys() else None,
        "minutes_total": (time.time() - t0) / 60,
    }
    result["verdict"] = verdict(result)
    (args.out / "episode_learning.json").write_text(json.dumps(result, indent=1))
    print_tables(result)
    title = f"{args.env} held-out episodes, rule-checked success (95% CI)"
    plot(result, args.out / "episode_learning.png", key="success", ylabel="held-out success (%)", title=title)
    return 0


def _pts(x: float | None) -> str:
    return "-" if x is None or math.isnan(x) else f"{100 * x:+.1f}"


def _num(x: float | None, fmt: str) -> str:
    return "-" if x is None or math.isnan(x) else format(x, fmt)


def verdict(result: dict) -> str | None:
    f = result["finals"].get("grm")
    if f is None:
        return None
    lo, hi = f["gain_ci95"]
    met = f["gain"] is not None and f["gain"] >= TARGET and lo is not None and lo > 0
    return (
        f"GRM-only reward: {_pts(f['gain'])} points [{_pts(lo)}, {_pts(hi)}] in {result['steps']} steps; "
        f"target >= {100 * TARGET:.0f} with CI excluding 0: {'met' if met else 'not met'}"
    )


def print_tables(result: dict) -> None:
    print(f"\n## {result['env']}: held-out success (%) by step [95% Wilson CI]\n")
    print("| system | step | success | solved/decided | no signal | mean turns | mean generated tokens |")
    print("|---|---|---|---|---|---|---|")
    for system, points in result["curves"].items():
        for p in points:
            print(
                f"| {system} | {p['step']} | {_pct(p['success'])}{_ci(p['ci95'])} | {p['successes']}/{p['decided']} | "
                f"{p['no_signal']} | {_num(p['turns'], '.2f')} | {_num(p['tokens'], '.1f')} |"
            )
    print("\n## final vs initial (paired, same held-out tasks)\n")
    print(
        "| system | initial | final | gain (points) [95% CI] | CI excludes 0 | solved only by final / initial | "
        "turns change | tokens change | train minutes |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for system, f in result["finals"].items():
        print(
            f"| {system} | {_pct(f['initial'])} | {_pct(f['final'])} | {_pts(f['gain'])}{_ci(f['gain_ci95'])} | "
            f"{'yes' if f['ci_excludes_0'] else 'no'} | {f['only_final']} / {f['only_initial']} | "
            f"{_num(f['turns_change'], '+.2f')} | {_num(f['tokens_change'], '+.1f')} | {f['train_minutes']:.1f} |"
        )
    print()
    if result["grm_minus_length"] is not None:
        print(f"GRM gain - length-only gain: {_pts(result['grm_minus_length'])} points (no CI: two paired comparisons)")
    if result["verdict"]:
        print(result["verdict"])
    train = ", ".join(f"{s} {f['train_minutes']:.1f}" for s, f in result["finals"].items())
    print(f"train minutes: {train}")
    print(f"\ncpu: {result['cpu']}; {result['minutes_total']:.1f} min in all")


if __name__ == "__main__":
    raise SystemExit(main())
