"""Does training a judge with grm make it a better judge? (#43 part 2)

Trains ``--model`` as a pairwise judge with ``pipelines/judge-grpo.yaml`` (the judge spec's own
prompt in both orders over the training side of the constraint pairs, the verdict rule as reward,
GRPO with KL; ``--lora r,alpha`` to train adapters), then scores the base model and the trained run
with the same judge spec (``--judge``, default ``builtin:pairwise-preference``) on held-out pairs the
training never saw (``--eval-data``, default the first ``--pairs`` of
``builtin:constraints-lexical-pairs``: held-out topics) with ``grm eval``. Prints the machine, a
table per model (swap-combined accuracy, accuracy where the better response is the shorter one,
parse failures, each with its 95% CI) and the paired gain of trained over base (items judged by
both, bootstrap 95% CI over items); writes ``judge_training.json`` under --out. Every figure comes
from the eval directories (``metrics.json``, ``results.jsonl``). Resumable: a finished run or eval is
kept, a stopped one resumes. ``--dry-run`` prints the commands and runs nothing.

    python benchmarks/judge_training.py --model smollm2-135m-instruct --steps 60 --pairs 100
    python benchmarks/judge_training.py --model qwen2.5-coder-0.5b-instruct --lora 16,32 --steps 60
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

from learning_curve import _ci, _pct, grm, latest_step  # beside this file
from machine import describe, machine

ROOT = Path(__file__).resolve().parents[1]


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m-instruct", help="the judge model to train (alias or directory)")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--pairs", type=int, default=100, help="held-out pairs evaluated")
    ap.add_argument("--judge", default="builtin:pairwise-preference", help="the judge spec trained and evaluated")
    ap.add_argument("--eval-data", default="builtin:constraints-lexical-pairs", help="held-out labelled pairs")
    ap.add_argument("--eval-tokens", type=int, default=96, help="critique tokens in the evaluation")
    ap.add_argument("--lora", help="R,ALPHA: train LoRA adapters of that rank and alpha (default: every weight)")
    ap.add_argument("--out", default="bench-out/judge-training")
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument("overrides", nargs="*", help="pipeline overrides for the training run, e.g. train.lr=5e-6")
    args = ap.parse_args()
    if min(args.steps, args.pairs, args.eval_tokens) < 1:
        ap.error("--steps, --pairs and --eval-tokens must be at least 1")
    if args.lora is not None:
        try:
            r, alpha = (float(x) for x in args.lora.split(","))
            assert r >= 1 and alpha > 0 and r == int(r)
        except (ValueError, AssertionError):
            ap.error(f"--lora {args.lora!r}: give R,ALPHA, e.g. 16,32")
        args.lora = (int(r), alpha)
    return args


def policy_spec(out: Path, model: str) -> Path:
    """A policy spec for the judge model (the shipped one for SmolLM2; written for any other)."""
    if model == "smollm2-135m-instruct":
        return ROOT / "policy" / "smollm2-135m-instruct.yaml"
    path = (out / "judge-policy.yaml").resolve()
    path.write_text(
        f"name: judge-policy\nmodel: {model}\nengine: {{type: hf, dtype: fp32, max_batch_size: 32}}\n"
        "generation: {max_new_tokens: 96, temperature: 1.0, top_p: 1.0}\n"
    )
    return path


def train_args(args: argparse.Namespace, out: Path) -> list[str]:
    run = out / "run"
    extra = [f"train.lora={{r: {args.lora[0]}, alpha: {args.lora[1]}}}"] if args.lora else []
    return [
        "run",
        "builtin:judge-grpo",
        f"out_dir={run}",
        f"policy.spec={policy_spec(out, args.model)}",
        f"data.judge_prompts={args.judge}",
        f"train.steps={args.steps}",
        "checkpoint.export=true",
        *extra,
        *args.overrides,
        *(["--resume", str(run)] if (run / "metrics.jsonl").exists() else []),
    ]


def eval_args(args: argparse.Namespace, model: str, out: Path) -> list[str]:
    return [
        "eval",
        args.judge,
        f"model={model}",
        f"sampling.max_new_tokens={args.eval_tokens}",
        "--data",
        args.eval_data,
        "--limit",
        str(args.pairs),
        "--out",
        str(out),
    ]


def item_correct(eval_dir: Path) -> dict[str, float | None]:
    """Per item: 1 right (swap-combined verdict for the labelled side), 0 wrong, 0.5 a tie, None masked."""
    out = {}
    for line in (eval_dir / "results.jsonl").read_text().splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        res = row["results"][0]
        v = res.get("verdict")
        if v is None:
            out[row["item_id"]] = None
        elif v == "tie":
            out[row["item_id"]] = 0.5
        else:
            out[row["item_id"]] = float((v == "A") == (row["label"] == 1))
    return out


def paired_gain(base: dict, trained: dict, rounds: int = 2000) -> dict:
    """Trained minus base accuracy on the items both judged (masked counts as 0.5, a coin), with a
    bootstrap 95% CI over items."""
    ids = sorted(set(base) & set(trained))
    diffs = [(trained[i] if trained[i] is not None else 0.5) - (base[i] if base[i] is not None else 0.5) for i in ids]
    if not diffs:
        return {"n": 0, "gain": None, "ci95": None}
    rng = random.Random(0)
    means = sorted(sum(rng.choice(diffs) for _ in diffs) / len(diffs) for _ in range(rounds))
    return {
        "n": len(diffs),
        "gain": sum(diffs) / len(diffs),
        "ci95": [means[int(0.025 * rounds)], means[int(0.975 * rounds) - 1]],
    }


def summary(eval_dir: Path, judge: str) -> dict:
    m = json.loads((eval_dir / "metrics.json").read_text())["judges"][judge]
    pairs, length = m["pairs"], m["pairs"]["length"]
    return {
        "n": pairs["n"],
        "accuracy": pairs["accuracy_swap_combined"],
        "accuracy_ci95": pairs["accuracy_swap_combined_ci95"],
        "shorter_preferred_accuracy": length.get("accuracy_shorter_preferred"),
        "shorter_preferred_ci95": length.get("accuracy_shorter_preferred_ci95"),
        "n_shorter_preferred": length.get("n_shorter_preferred"),
        "positional_agreement": pairs["positional_agreement"],
        "parse_failure_rate": m["parse_failure_rate"],
        "masked_rate": m["masked_rate"],
    }


def main() -> None:
    args = parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    print(describe(machine()), flush=True)
    run = out / "run"
    cmds = []
    if latest_step(run) < args.steps:
        cmds.append(train_args(args, out))
    evals = {"base": (args.model, out / "eval-base"), "trained": (str(run), out / "eval-trained")}
    for model, d in evals.values():
        if not (d / "metrics.json").exists() or len((d / "results.jsonl").read_text().splitlines()) < args.pairs:
            cmds.append(eval_args(args, model, d))
    if args.dry_run:
        for c in cmds:
            print("$ grm", " ".join(c))
        return
    for c in cmds:
        grm(*c)
    judge = json.loads((out / "eval-base" / "metrics.json").read_text())["judges"]
    name = next(iter(judge))
    rows = {k: summary(d, name) for k, (_, d) in evals.items()}
    gain = paired_gain(item_correct(out / "eval-base"), item_correct(out / "eval-trained"))
    result = {"args": {k: v for k, v in vars(args).items()}, "judge": name, "rows": rows, "paired_gain": gain}
    (out / "judge_training.json").write_text(json.dumps(result, indent=2))
    lora = f", LoRA r={args.lora[0]} alpha={args.lora[1]:g}" if args.lora else ""
    print(f"\n## {name} on {args.eval_data} (first {args.pairs}), {args.model}, {args.steps} steps{lora}\n")
    print(
        "| judge | pairs | swap-combined accuracy (%) [95% CI] | shorter-preferred accuracy (%) [95% CI] (n) "
        "| positional agreement | parse failures |"
    )
    print("|---|---|---|---|---|---|")
    for k, r in rows.items():
        print(
            f"| {k} | {r['n']} | {_pct(r['accuracy'])}{_ci(r['accuracy_ci95'])} | "
            f"{_pct(r['shorter_preferred_accuracy'])}{_ci(r['shorter_preferred_ci95'])} ({r['n_shorter_preferred']}) | "
            f"{_pct(r['positional_agreement'])} | {_pct(r['parse_failure_rate'])} |"
        )
    g = gain
    print(f"\npaired gain, trained - base: {_pct(g['gain'])} points{_ci(g['ci95'])} over {g['n']} items (masked = a coin)")
    print(f"wrote {out / 'judge_training.json'}")


if __name__ == "__main__":
    sys.exit(main())
