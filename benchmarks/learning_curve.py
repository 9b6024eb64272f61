"""Does judge-driven RL make the policy better on something the judge never sees?

Trains SmolLM2 on ``builtin:constraints-lexical-train`` with up to three rewards, in one invocation:
- ``grm``: the GRM judge alone (``pipelines/instruct-grm.yaml``: a checklist judge reads each
  prompt's own yes/no questions as P(yes); the rule checkers ride along at weight 0 as a monitor);
- ``verifier``: the rule checkers themselves as the reward (``pipelines/instruct-verifier.yaml``,
  the upper bound: what a perfect judge of these constraints would teach);
- ``length``: a reward that reads length only (``pipelines/instruct-length.yaml``, the hacking
  control: if it gains on held-out accuracy, length explains the GRM's gain too).
Each run is extended ``--eval-every`` steps at a time (``grm run ... --resume``; the LR is constant,
so the segments are one run), and after each segment its latest checkpoint is evaluated on
``builtin:constraints-lexical-heldout`` (topics the training prompts never use) with ``grm eval --policy``
and the rule checkers (``builtin:constraints``): strict accuracy (every constraint of the prompt
holds) with a 95% bootstrap interval, accuracy per constraint type, and response length. The
initial policy is evaluated once, the same way. The final checkpoint of each run is then compared
with the initial policy on the same prompts (paired): the difference in held-out strict accuracy
with its interval, and the GRM judge's win rate of final over initial (per prompt, the higher
judge score wins, ties count half).

A system may name a schedule after a colon (``verifier:sync``, ``verifier:interruptible-2``): the
same pipeline under that schedule (``SCHEDULES``), so a schedule's learning curve is compared with
sync's in one invocation. ``interruptible-2`` (#44 item 3) serves the policy from the SGLang stand-in
(``tests/serving/sglang_standin.py``, one thread, started here) with ``max_staleness: 2`` and
interruptible rollouts; its trainer gets the other core. A seed may follow after ``@``
(``verifier:sync@1``: the pipeline's ``seed=1``, in its own directory ``verifier-sync-seed1``); the
systems that differ only in their seed are then pooled: each group's final accuracy over seeds and
prompts, and each group against the first group, with a two-level bootstrap (seeds, then prompts),
so the interval holds training variance too.

Prints a markdown table and the 'recovered' share (GRM gain / verifier gain), writes
``learning_curve.png`` and ``learning_curve.json`` under --out. Every number comes from the eval
directories' ``summary.json``; a stopped invocation resumes (runs and evals are resumable).

    python benchmarks/learning_curve.py --steps 40 --eval-every 10 --heldout 100
    python benchmarks/learning_curve.py --systems grm,verifier --steps 20 --eval-every 10 train.lr=2e-5
    python benchmarks/learning_curve.py --systems verifier:sync,verifier:interruptible-2 --eval-every 20
    python benchmarks/learning_curve.py --eval-every 20 \
        --systems verifier:sync,verifier:sync@1,verifier:interruptible-2,verifier:interruptible-2@1
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from machine import describe, machine  # beside this file

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
PIPELINES = {
    "grm": ROOT / "pipelines" / "instruct-grm.yaml",
    "verifier": ROOT / "pipelines" / "instruct-verifier.yaml",
    "length": ROOT / "pipelines" / "instruct-length.yaml",
}
# a schedule after the colon of a system: its overrides ({url}: the stand-in server's)
SCHEDULES = {
    "sync": ["schedule.mode=sync"],
    "async-1": ["schedule.mode=async", "schedule.max_staleness=1"],
    "interruptible-2": [
        "schedule.mode=async",
        "schedule.max_staleness=2",
        "schedule.interruptible=true",
        'policy.overrides=["engine={{type: sglang, urls: [\\"{url}\\"], weight_sync: broadcast}}"]',
        "pools.train.cpus=1",  # the stand-in decodes on the other core
    ],
}
SERVED = {"interruptible-2"}  # schedules whose policy the stand-in serves
INITIAL = "builtin:smollm2-135m-instruct"
HELDOUT = "builtin:constraints-lexical-heldout"
CHECKERS = "builtin:constraints"


def grm(*args: str) -> None:
    cmd = [sys.executable, "-m", "grm", *args]
    print("$", " ".join(cmd), flush=True)
    r = subprocess.run(cmd, cwd=ROOT)
    if r.returncode != 0:
        raise SystemExit(f"failed ({r.returncode}): {' '.join(cmd)}")


def latest_step(run: Path) -> int:
    """The run's newest complete checkpoint (0 if none): with ``checkpoint.keep=1`` only the last is kept."""
    done = [int(c.name.removeprefix("step-")) for c in (run / "checkpoints").glob("step-*") if (c / "COMPLETE").exists()]
    return max(done, default=0)


def evaluate(policy: str, out: Path, args: argparse.Namespace, judges: str = CHECKERS, against: str | None = None) -> dict:
    if (out / "summary.json").exists():  # evaluated in an earlier invocation (its checkpoint may since be replaced)
        return json.loads((out / "summary.json").read_text())
    extra = ["--against", against] if against else []
    grm(
        "eval",
        judges,
        "--policy",
        policy,
        "--prompts",
        HELDOUT,
        "--limit",
        str(args.heldout),
        "--max-new-tokens",
        str(args.max_new_tokens),
        "--out",
        str(out),
        *extra,
        *args.judge_overrides,
    )
    return json.loads((out / "summary.json").read_text())


def strict(summary: dict, side: str = "policy") -> dict:
    s = summary["sides"][side]
    return {
        "accuracy": s["judges"]["constraints"]["mean"],
        "ci95": s["judges"]["constraints"]["ci95"],
        "by_type": {k: v["mean"] for k, v in (s["judges"]["constraints"].get("details") or {}).items()},
        "tokens": s["tokens"]["mean"],
    }


def judge_win_rate(out: Path, judge: str) -> dict | None:
    """Final vs initial under the GRM judge: per prompt the higher score wins, ties count half."""
    from grm.evaluation.metrics import win_rate

    path = out / "results.jsonl"
    if not path.exists():
        return None
    score: dict[tuple[str, str], float | None] = {}
    for line in path.read_text().splitlines():
        if line.strip():
            x = json.loads(line)
            if x["judge"] == judge and x["side"] in ("policy", "other"):
                score[(x["side"], x["prompt_id"])] = x["score"]
    ids = sorted({pid for _, pid in score})
    verdicts: list[Any] = []
    for pid in ids:
        a, b = score.get(("policy", pid)), score.get(("other", pid))
        verdicts.append(None if a is None or b is None else "1" if a > b else "2" if b > a else "tie")
    return win_rate(verdicts) if verdicts else None


def train_and_evaluate(
    systems: list[str], initial: dict, args: argparse.Namespace, out: Path, url: str | None
) -> tuple[dict[str, list[dict]], dict[str, float]]:
    """Each system's run, extended ``--eval-every`` steps at a time and evaluated after each segment:
    its curve (from the initial policy's point) and its training minutes."""
    curves: dict[str, list[dict]] = {}
    minutes: dict[str, float] = {}
    for system in systems:
        pipeline, schedule, seed = parts(system)
        at = out / folder(system)
        run = at / "run"
        scheduled = [o.format(url=url) for o in SCHEDULES.get(schedule, [])] + ([f"seed={seed}"] if seed is not None else [])
        curves[system] = [{"step": 0, **initial}]
        timing = at / "train_seconds.json"  # per segment, kept across invocations
        seconds: dict[str, float] = json.loads(timing.read_text()) if timing.exists() else {}
        for steps in range(args.eval_every, args.steps + 1, args.eval_every):
            resume = ["--resume", str(run)] if (run / "config.resolved.yaml").exists() else []
            t = time.time()
            if not evaluated(at, steps) and latest_step(run) < steps:
                grm(
                    "run",
                    str(PIPELINES[pipeline]),
                    f"out_dir={run}",
                    f"train.steps={steps}",
                    f"checkpoint.every={args.eval_every}",
                    "checkpoint.keep=1",
                    "checkpoint.export=false",  # evals read the checkpoints; each segment would export again
                    f"rollout.max_new_tokens={args.max_new_tokens}",
                    *scheduled,
                    *args.overrides,
                    *resume,
                )
                seconds[str(steps)] = time.time() - t
                timing.write_text(json.dumps(seconds))
            curves[system].append({"step": steps, **strict(evaluate(str(run), at / f"eval-step{steps}", args))})
        minutes[system] = sum(seconds.values()) / 60
    return curves, minutes


def parts(system: str) -> tuple[str, str, int | None]:
    """``PIPELINE[:SCHEDULE][@SEED]`` -> (pipeline, schedule or "", seed or None)."""
    name, _, seed = system.partition("@")
    pipeline, _, schedule = name.partition(":")
    return pipeline, schedule, int(seed) if seed else None


def folder(system: str) -> str:
    """A system's directory under --out (``verifier:sync`` -> ``verifier-sync``, ``verifier:sync@1`` ->
    ``verifier-sync-seed1``)."""
    name, _, seed = system.partition("@")
    return name.replace(":", "-") + (f"-seed{seed}" if seed else "")


def evaluated(at: Path, steps: int) -> bool:
    """Whether a system's checkpoint at ``steps`` was evaluated in an earlier invocation: its segment
    needs no training then, even where its checkpoints have since been deleted."""
    return (at / f"eval-step{steps}" / "summary.json").exists()


@contextlib.contextmanager
def served(needed: bool, out: Path) -> Iterator[str | None]:
    """The SGLang stand-in serving the initial policy while the block runs (None when not needed)."""
    if not needed:
        yield None
        return
    from interruptible_rollouts import start_server  # beside this file

    from grm.process import free_port

    port = free_port()
    out.mkdir(parents=True, exist_ok=True)
    server = start_server(port, out / "standin.log")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(timeout=30)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--systems", default="grm,verifier,length", help="comma list of: " + ", ".join(PIPELINES))
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--eval-every", type=int, default=10)
    ap.add_argument("--heldout", type=int, default=100, help="held-out prompts evaluated")
    ap.add_argument("--max-new-tokens", type=int, default=128, help="the pipelines' rollout length")
    ap.add_argument("--judge", default="builtin:checklist-data-logprob", help="the GRM judge, for its win rate")
    ap.add_argument("--judge-model", default="qwen2.5-coder-1.5b-instruct", help="the GRM pipeline's judge model")
    ap.add_argument("--judge-dtype", default="auto", help="the GRM judge's engine dtype (instruct-grm.yaml's: auto)")
    ap.add_argument("--judge-controls", action="store_true", help="read the judge's win rate for the controls too")
    ap.add_argument("--out", default="bench-out/learning-curve")
    ap.add_argument("overrides", nargs="*", help="pipeline overrides for every run, e.g. train.lr=2e-5")
    args = ap.parse_args()
    args.judge_overrides = [f"model={args.judge_model}", f"engine.dtype={args.judge_dtype}"]
    out = Path(args.out).resolve()
    systems = args.systems.split(",")
    if bad := [s for s in systems if not known(s)]:
        ap.error(
            f"unknown system(s) {bad}; choose from {list(PIPELINES)}, each optionally :{'|'.join(SCHEDULES)} "
            "and @SEED (an integer >= 0)"
        )
    if args.steps % args.eval_every:
        ap.error("--steps must be a multiple of --eval-every")
    facts = machine()
    print(json.dumps(facts), flush=True)
    print(f"cpu: {describe(facts)}; torch threads: {os.environ.get('OMP_NUM_THREADS', 'default')}", flush=True)

    t0 = time.time()
    initial = strict(evaluate(INITIAL, out / "initial", args))
    unfinished = [s for s in systems if not evaluated(out / folder(s), args.steps)]
    with served(any(parts(s)[1] in SERVED for s in unfinished), out) as url:  # a finished run needs no server
        curves, minutes = train_and_evaluate(systems, initial, args, out, url)
    finals: dict[str, dict] = {}
    for system in systems:
        cmp_dir = out / folder(system) / f"final-vs-initial-step{args.steps}"  # a longer invocation compares its own final
        # the GRM judge's win rate is read for the GRM run (for the controls too with --judge-controls):
        # a 1.5B judge over 200 more responses per system is minutes of CPU on a 2-core machine
        judged = parts(system)[0] == "grm" or args.judge_controls
        judges = f"{CHECKERS},{args.judge}" if judged else CHECKERS
        summary = evaluate(str(out / folder(system) / "run"), cmp_dir, args, judges=judges, against=INITIAL)
        diff = summary["comparison"]["judges"]["constraints"]
        finals[system] = {
            "accuracy_gain": diff["mean"],
            "accuracy_gain_ci95": diff["ci95"],
            "judge_win_rate": judge_win_rate(cmp_dir, Path(args.judge.removeprefix("builtin:")).stem),
            "tokens_change": summary["comparison"]["tokens_difference"]["mean"],
            "train_minutes": minutes[system],
        }

    result = {"cpu": describe(facts), "args": {k: v for k, v in vars(args).items()}, "curves": curves, "finals": finals}
    result["training"] = {system: training_facts(out / folder(system) / "run") for system in systems}
    result["versus_first"] = versus_first(systems, out, args)
    result["pooled"] = pooled(systems, out, args)
    result["minutes_total"] = (time.time() - t0) / 60
    (out / "learning_curve.json").write_text(json.dumps(result, indent=1))
    print_table(result)
    plot(result, out / "learning_curve.png")
    return 0


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}"


def _ci(ci: list | tuple | None) -> str:
    return "" if not ci or ci[0] is None else f" [{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]"


def per_prompt(eval_dir: Path) -> dict[str, float | None]:
    """The rule checkers' score of each held-out prompt in an eval directory."""
    rows = [json.loads(x) for x in (eval_dir / "results.jsonl").read_text().splitlines() if x.strip()]
    return {r["prompt_id"]: r["score"] for r in rows if r["judge"] == "constraints" and r["side"] == "policy"}


def versus_first(systems: list[str], out: Path, args: argparse.Namespace) -> dict[str, list[dict]]:
    """Each later system against the first at every evaluated step, paired on the same held-out
    prompts (greedy answers, rule-checked): the accuracy difference with its 95% bootstrap interval."""
    from grm.stats import paired_difference

    first, pairs = systems[0], {}
    for system in systems[1:]:
        pairs[system] = []
        for steps in range(args.eval_every, args.steps + 1, args.eval_every):
            a = per_prompt(out / folder(system) / f"eval-step{steps}")
            b = per_prompt(out / folder(first) / f"eval-step{steps}")
            ids = sorted(set(a) & set(b))
            diff = paired_difference([a[i] for i in ids], [b[i] for i in ids])
            pairs[system].append({"step": steps, "minus": first, **diff})
    return pairs


def known(system: str) -> bool:
    try:
        pipeline, schedule, seed = parts(system)
    except ValueError:  # a seed that is not an integer
        return False
    return pipeline in PIPELINES and schedule in ("", *SCHEDULES) and (seed is None or seed >= 0) and not system.endswith("@")


def seeds_bootstrap(
    a: list[dict[str, float | None]], b: list[dict[str, float | None]] | None = None, rounds: int = 2000, seed: int = 0
) -> dict:
    """Group ``a``'s mean score over its seeds (runs) and prompts, minus group ``b``'s (None: a's mean
    alone), with a 95% interval from a two-level bootstrap: each round draws each group's seeds with
    replacement, then the prompts (one draw for both groups: the prompts are the same, so what a
    prompt's difficulty adds cancels). Prompts some run left unscored are dropped from all."""
    runs = a + (b or [])
    ids = sorted(set.intersection(*(set(k for k, v in d.items() if v is not None) for d in runs)))
    if not ids:
        return {"mean": None, "ci95": None, "seeds": [len(a), len(b or [])], "prompts": 0}
    A = [[float(d[i]) for i in ids] for d in a]  # type: ignore[arg-type]
    B = [[float(d[i]) for i in ids] for d in b or []]

    def mean(group: list[list[float]], draw: list[int]) -> float:
        return sum(sum(s[i] for i in draw) / len(draw) for s in group) / len(group)

    def diff(ga: list[list[float]], gb: list[list[float]], draw: list[int]) -> float:
        return mean(ga, draw) - (mean(gb, draw) if gb else 0.0)

    rng = random.Random(seed)
    every = list(range(len(ids)))
    means = sorted(
        diff([rng.choice(A) for _ in A], [rng.choice(B) for _ in B], [rng.randrange(len(ids)) for _ in ids])
        for _ in range(rounds)
    )
    return {
        "mean": diff(A, B, every),
        "ci95": [means[int(0.025 * rounds)], means[int(0.975 * rounds) - 1]],
        "seeds": [len(A), len(B)],
        "prompts": len(ids),
    }


def pooled(systems: list[str], out: Path, args: argparse.Namespace) -> list[dict]:
    """Systems that differ only in their seed, pooled: each group's held-out accuracy at the last step
    over its seeds and prompts, and (after the first) its difference from the first group. Empty
    when no system has a second seed."""
    groups: dict[str, list[str]] = {}
    for s in systems:
        groups.setdefault(s.partition("@")[0], []).append(s)
    if all(len(g) == 1 for g in groups.values()):
        return []
    last = {s: per_prompt(out / folder(s) / f"eval-step{args.steps}") for s in systems}
    first = next(iter(groups))
    rows = []
    for name, members in groups.items():
        row = {"group": name, "members": members, "accuracy": seeds_bootstrap([last[s] for s in members])}
        if name != first:
            row["minus"] = first
            row["difference"] = seeds_bootstrap([last[s] for s in members], [last[s] for s in groups[first]])
        rows.append(row)
    return rows


def training_facts(run: Path) -> dict:
    """What a run's metrics.jsonl says of its training: step seconds (median), the mean reward of
    its first and last quarter of steps, the share of sampled tokens by how many versions behind
    the trained weights they were (the off-policy share an async or interruptible schedule
    adds), the share of responses spanning versions, and the TIS weights (mean, share capped)."""
    import statistics

    from interruptible_rollouts import tokens_by_lag  # beside this file

    ms = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]
    quarter = max(1, len(ms) // 4)
    return {
        "steps": len(ms),
        "median_step_s": statistics.median(m["seconds_step"] for m in ms),
        "reward_first_quarter": statistics.mean(m["reward_mean"] for m in ms[:quarter]),
        "reward_last_quarter": statistics.mean(m["reward_mean"] for m in ms[-quarter:]),
        "tokens_by_lag": tokens_by_lag(ms),
        "spanning_versions": statistics.mean(m.get("rollout/spanning_versions", 0.0) for m in ms),
        "tis_weight_mean": statistics.mean(m.get("tis_weight_mean", 1.0) for m in ms),
        "tis_capped_frac": statistics.mean(m.get("tis_capped_frac", 0.0) for m in ms),
    }


def print_table(result: dict) -> None:
    print("\n## held-out strict accuracy (%) by step [95% CI]\n")
    print("| system | step | accuracy | mean tokens |")
    print("|---|---|---|---|")
    for system, points in result["curves"].items():
        for p in points:
            print(f"| {system} | {p['step']} | {_pct(p['accuracy'])}{_ci(p['ci95'])} | {p['tokens']:.1f} |")
    print("\n## final vs initial (paired, same held-out prompts)\n")
    print("| system | accuracy gain (points) [95% CI] | GRM judge win rate [95% CI] | token change | train minutes |")
    print("|---|---|---|---|---|")
    for system, f in result["finals"].items():
        wr = f["judge_win_rate"]
        wr_s = "-" if not wr else f"{_pct(wr['win_rate'])}{_ci(wr['ci95'])}"
        print(
            f"| {system} | {_pct(f['accuracy_gain'])}{_ci(f['accuracy_gain_ci95'])} | {wr_s} | "
            f"{f['tokens_change']:+.1f} | {f['train_minutes']:.1f} |"
        )
    if result.get("versus_first"):
        print("\n## against the first system (paired, same held-out prompts)\n")
        print("| system | minus | step | accuracy difference (points) [95% CI] | prompts |")
        print("|---|---|---|---|---|")
        for system, rows in result["versus_first"].items():
            for r in rows:
                print(f"| {system} | {r['minus']} | {r['step']} | {_pct(r['mean'])}{_ci(r['ci95'])} | {r['n']} |")
    if result.get("training"):
        print("\n## training (each run's metrics.jsonl)\n")
        print(
            "| system | steps | median step s | reward, first / last quarter | tokens by lag | spanning versions "
            "| TIS weight mean | TIS capped |"
        )
        print("|---|---|---|---|---|---|---|---|")
        for system, t in result["training"].items():
            lags = ", ".join(f"{k}: {v:.2f}" for k, v in t["tokens_by_lag"].items())
            print(
                f"| {system} | {t['steps']} | {t['median_step_s']:.1f} | {t['reward_first_quarter']:.3f} / "
                f"{t['reward_last_quarter']:.3f} | {lags} | {t['spanning_versions']:.2f} | {t['tis_weight_mean']:.3f} | "
                f"{t['tis_capped_frac']:.3f} |"
            )
    if result.get("pooled"):
        print(f"\n## pooled over seeds at step {result['args']['steps']} (two-level bootstrap: seeds, then prompts)\n")
        print("| group | seeds | accuracy [95% CI] | minus | difference (points) [95% CI] |")
        print("|---|---|---|---|---|")
        for r in result["pooled"]:
            acc, d = r["accuracy"], r.get("difference")
            diff_s = f"{_pct(d['mean'])}{_ci(d['ci95'])}" if d else "-"
            acc_s = f"{_pct(acc['mean'])}{_ci(acc['ci95'])}"
            print(f"| {r['group']} | {len(r['members'])} | {acc_s} | {r.get('minus', '-')} | {diff_s} |")
    f = result["finals"]
    if "grm" in f and "verifier" in f and f["verifier"]["accuracy_gain"] > 0:
        print(f"\nrecovered: GRM gain / verifier gain = {f['grm']['accuracy_gain'] / f['verifier']['accuracy_gain']:.2f}")
    print(f"\ncpu: {result['cpu']}; {result['minutes_total']:.1f} min in all")


def plot(
    result: dict,
    path: Path,
    key: str = "accuracy",
    ylabel: str = "held-out strict accuracy (%)",
    title: str = "constraints-lexical-heldout, rule-checked (95% CI)",
) -> None:
    """Each system's curve of ``key`` (a rate) by step with its 95% CI (also episode_learning.py's)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for system, points in result["curves"].items():
        xs = [p["step"] for p in points]
        ys = [100 * p[key] for p in points]
        cis = [p["ci95"] if p["ci95"] and p["ci95"][0] is not None else (p[key],) * 2 for p in points]
        lo = [100 * (p[key] - ci[0]) for p, ci in zip(points, cis, strict=True)]
        hi = [100 * (ci[1] - p[key]) for p, ci in zip(points, cis, strict=True)]
        ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", capsize=3, label=system)
    ax.set_xlabel("training step")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"plot: {path}")


if __name__ == "__main__":
    raise SystemExit(main())
