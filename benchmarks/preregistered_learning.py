"""The learning proof as a pre-registered experiment (#43 part 1): does a GRM-only reward teach
SmolLM2 to follow instructions on prompts that share nothing with training but the constraint kinds?

Everything that decides the outcome is fixed in ``PROTOCOL`` below, written to ``protocol.json``
before anything runs and checked on every later invocation (a changed protocol is refused: start a
new --out). In order:
1. **The GRM judge is chosen on the training side.** Each candidate judge that sees only the
   instruction and the response (``CANDIDATES``: it writes or reads nothing the data provides) is
   scored by ``grm eval`` on ``builtin:constraints-lexical-dev-pairs`` (pairs over the training
   side's dev prompts: training topics, tasks and vocabulary, no training text); the highest
   swap-combined accuracy wins (``choice.json``). The held-out split is never read before training.
2. **Systems x seeds.** ``grm`` (the chosen judge alone), ``grm-checklist`` (the data-checklist
   judge of ``instruct-grm.yaml``: a second row, since its checklist restates the checker), the
   ``verifier`` upper bound and the ``length`` hacking control, each with seeds 0, 1, 2, each for
   ``STEPS`` steps on ``builtin:constraints-lexical-train``; the judges' gates read the dev pairs.
3. **Held-out evaluation** at ``EVAL_AT`` steps (and the initial policy once) on
   ``builtin:constraints-lexical-unseen`` (held-out topics, task templates and keyword/phrase
   vocabulary), greedy, scored by the rule checkers (strict: every constraint holds); with
   ``--external FILE`` also on an IFEval-style file (``grm.data.ifeval``: the rows whose every
   instruction grm's checkers implement).
4. **The gain** of each system: final minus initial strict accuracy per seed (paired by prompt), and
   pooled over seeds with a hierarchical bootstrap (seeds resampled, then prompts within each), so
   the interval holds training variance too; the GRM's share of the verifier's gain; the verdict
   against the targets (pooled GRM gain >= 10 points with the CI above 0, >= 60% of the verifier's,
   the length control below 0).

Prints the machine, the protocol, the judge choice, a table per split and the verdict; writes
``preregistered.json`` and ``preregistered.png``. Resumable (runs and evals are), ``--dry-run``
prints the commands and runs nothing. Hours of CPU: every other job must wait.

    python benchmarks/preregistered_learning.py
    python benchmarks/preregistered_learning.py --external ifeval_input_data.jsonl --dry-run
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from learning_curve import _ci, _pct, grm, latest_step, seeds_bootstrap  # beside this file
from machine import describe, machine

ROOT = Path(__file__).resolve().parents[1]
JUDGE_MODEL = "qwen2.5-coder-1.5b-instruct"
PROTOCOL = {
    "steps": 60,
    "eval_at": [20, 40, 60],
    "seeds": [0, 1, 2],
    "systems": ["grm", "grm-checklist", "verifier", "length"],
    "train_data": "builtin:constraints-lexical-train",
    "dev_pairs": "builtin:constraints-lexical-dev-pairs",
    "dev_pairs_limit": 100,
    "heldout": "builtin:constraints-lexical-unseen",
    "heldout_limit": 100,
    "candidates": ["builtin:checklist-logprob", "builtin:pointwise-logprob", "builtin:helpfulness-pointwise-logprob"],
    "judge_model": JUDGE_MODEL,
    "choice_rule": "highest accuracy_swap_combined on dev_pairs (ties: the earlier candidate)",
    "max_new_tokens": 128,
    "bootstrap": {"rounds": 2000, "seed": 0, "levels": ["seed", "prompt"]},
    "targets": {"grm_gain_points": 10, "ci_excludes_zero": True, "share_of_verifier": 0.6, "length_gain_below": 0},
}
PIPELINES = {
    "grm": "instruct-grm.yaml",
    "grm-checklist": "instruct-grm.yaml",
    "verifier": "instruct-verifier.yaml",
    "length": "instruct-length.yaml",
}
INITIAL = "builtin:smollm2-135m-instruct"
CHECKERS = "builtin:constraints"


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--external", help="an IFEval-style .jsonl (prompt, instruction_id_list, kwargs) evaluated beside")
    ap.add_argument("--out", default="bench-out/preregistered")
    ap.add_argument("--dry-run", action="store_true")
    return ap.parse_args()


def check_protocol(out: Path, external: str | None) -> dict:
    proto = {**PROTOCOL, "external": external}
    f = out / "protocol.json"
    if f.exists():
        old = json.loads(f.read_text())
        if old != proto:
            raise SystemExit(f"{f} records another protocol; this one is pre-registered once: use a new --out")
    else:
        out.mkdir(parents=True, exist_ok=True)
        f.write_text(json.dumps(proto, indent=1))
    return proto


def choose_judge(out: Path, cmds: list[list[str]], dry: bool) -> str | None:
    """The candidate with the highest swap-combined accuracy on the dev pairs (``choice.json``)."""
    f = out / "choice.json"
    if f.exists():
        return json.loads(f.read_text())["judge"]
    scores = {}
    for cand in PROTOCOL["candidates"]:
        d = out / "choose" / Path(cand.removeprefix("builtin:")).stem
        if not (d / "metrics.json").exists():
            cmd = ["eval", cand, f"model={JUDGE_MODEL}", "--data", PROTOCOL["dev_pairs"]]
            cmds.append([*cmd, "--limit", str(PROTOCOL["dev_pairs_limit"]), "--out", str(d)])
            if dry:
                continue
            grm(*cmds[-1])
        m = json.loads((d / "metrics.json").read_text())["judges"]
        scores[cand] = next(iter(m.values()))["pairs"]["accuracy_swap_combined"]
    if dry:
        return None
    best = max(PROTOCOL["candidates"], key=lambda c: (scores[c], -PROTOCOL["candidates"].index(c)))
    f.write_text(json.dumps({"judge": best, "dev_accuracy": scores}, indent=1))
    return best


def run_overrides(system: str, judge: str | None) -> list[str]:
    gate = f"{{data: {PROTOCOL['dev_pairs']}, min_accuracy: 0.6, limit: {PROTOCOL['dev_pairs_limit']}}}"
    if system == "grm":
        return [f"judges.0.spec={judge}", f"judges.0.overrides=[model={JUDGE_MODEL}, engine.dtype=auto]", f"judges.0.gate={gate}"]
    if system == "grm-checklist":
        return [f"judges.0.gate={gate}"]
    return []


def evaluate(policy: str, out: Path, data: str, limit: int, cmds: list[list[str]], dry: bool) -> Path:
    if not (out / "summary.json").exists():
        cmds.append(["eval", CHECKERS, "--policy", policy, "--prompts", data, "--limit", str(limit)])
        cmds[-1] += ["--max-new-tokens", str(PROTOCOL["max_new_tokens"]), "--out", str(out)]
        if not dry:
            grm(*cmds[-1])
    return out


def strict_by_prompt(eval_dir: Path) -> dict[str, float]:
    """Per held-out prompt: 1 when every constraint held (the rule checkers), else 0."""
    out = {}
    for line in (eval_dir / "results.jsonl").read_text().splitlines():
        x = json.loads(line) if line.strip() else None
        if x and x["judge"] == "constraints" and x["side"] == "policy" and x["score"] is not None:
            out[x["prompt_id"]] = float(x["score"])
    return out


def hierarchical_gain(per_seed: list[dict[str, float]]) -> dict:
    """Mean gain over seeds and prompts, with a bootstrap resampling seeds, then prompts."""
    b = PROTOCOL["bootstrap"]
    pooled = seeds_bootstrap([d for d in per_seed if d], rounds=b["rounds"], seed=b["seed"]) if any(per_seed) else {}
    return {"gain": pooled.get("mean"), "ci95": pooled.get("ci95")}


def main() -> int:
    args = parse_args()
    out = Path(args.out).resolve()
    proto = check_protocol(out, str(Path(args.external).resolve()) if args.external else None)
    print(describe(machine()), flush=True)
    print("protocol:", json.dumps(proto), flush=True)
    cmds: list[list[str]] = []
    judge = choose_judge(out, cmds, args.dry_run)
    splits = {"unseen": (PROTOCOL["heldout"], PROTOCOL["heldout_limit"])}
    if args.external:
        splits["external"] = (str(Path(args.external).resolve()), 10**6)
    initial = {k: evaluate(INITIAL, out / f"initial-{k}", d, n, cmds, args.dry_run) for k, (d, n) in splits.items()}
    finals: dict[str, dict[str, list[Path]]] = {s: {k: [] for k in splits} for s in PROTOCOL["systems"]}
    for system in PROTOCOL["systems"]:
        for seed in PROTOCOL["seeds"]:
            run = out / system / f"seed-{seed}" / "run"
            for steps in PROTOCOL["eval_at"]:
                if latest_step(run) < steps:
                    cmd = ["run", str(ROOT / "pipelines" / PIPELINES[system]), f"out_dir={run}", f"seed={seed}"]
                    cmd += [f"train.steps={steps}", f"checkpoint.every={PROTOCOL['eval_at'][0]}", "checkpoint.keep=1"]
                    cmd += ["checkpoint.export=false", f"rollout.max_new_tokens={PROTOCOL['max_new_tokens']}"]
                    cmd += run_overrides(system, judge or "CHOSEN_JUDGE")
                    cmd += ["--resume", str(run)] if (run / "config.resolved.yaml").exists() else []
                    cmds.append(cmd)
                    if not args.dry_run:
                        grm(*cmd)
                for k, (d, n) in splits.items():
                    e = evaluate(str(run), out / system / f"seed-{seed}" / f"{k}-step{steps}", d, n, cmds, args.dry_run)
                    if steps == PROTOCOL["steps"]:
                        finals[system][k].append(e)
    if args.dry_run:
        for c in cmds:
            print("$ grm", " ".join(c))
        return 0
    result: dict = {"cpu": describe(machine()), "protocol": proto, "judge": judge, "splits": {}}
    for k in splits:
        base = strict_by_prompt(initial[k])
        rows = {}
        for system in PROTOCOL["systems"]:
            per_seed = []
            for e in finals[system][k]:
                got = strict_by_prompt(e)
                per_seed.append({p: got[p] - base[p] for p in got if p in base})
            pooled = hierarchical_gain(per_seed)
            seeds = [sum(d.values()) / len(d) if d else None for d in per_seed]
            rows[system] = {"per_seed": seeds, **pooled}
        result["splits"][k] = {"initial": sum(base.values()) / len(base), "rows": rows}
    (out / "preregistered.json").write_text(json.dumps(result, indent=1))
    print(f"\nGRM judge chosen on {PROTOCOL['dev_pairs']}: {judge}")
    for k, r in result["splits"].items():
        print(f"\n## {k}: strict accuracy gain, final (step {PROTOCOL['steps']}) - initial ({_pct(r['initial'])}%), points\n")
        print("| system | seed 0 | seed 1 | seed 2 | pooled [95% CI, seeds and prompts] |")
        print("|---|---|---|---|---|")
        for system, row in r["rows"].items():
            seeds = " | ".join(_pct(x) for x in row["per_seed"])
            print(f"| {system} | {seeds} | {_pct(row['gain'])}{_ci(row['ci95'])} |")
    rows = result["splits"]["unseen"]["rows"]
    g, v, ln = rows["grm"], rows["verifier"], rows["length"]
    t = PROTOCOL["targets"]
    share = g["gain"] / v["gain"] if g["gain"] is not None and v["gain"] else None
    ok = (
        g["gain"] is not None
        and 100 * g["gain"] >= t["grm_gain_points"]
        and g["ci95"][0] > 0
        and share is not None
        and share >= t["share_of_verifier"]
        and ln["gain"] is not None
        and ln["gain"] < t["length_gain_below"]
    )
    print(f"\nGRM share of the verifier's gain: {_pct(share)}%")
    print(f"verdict: {'target met' if ok else 'target not met'} (pooled GRM gain >= {t['grm_gain_points']} points, CI > 0, ")
    print(f"  >= {100 * t['share_of_verifier']:.0f}% of the verifier's, length control < 0)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
