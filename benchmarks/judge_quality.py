"""Judge quality on human-preference pairs: candidate judges x models x sets through `grm eval`.

Data: ../shared/data/human-preference/{mt-bench,llmeval2,faireval}.json (LLMBar format, read in
place, never copied). Each (judge, model, set) is one resumable eval directory under --out, so an
interrupted run continues where it stopped. Prints a markdown table (the one in judges/README.md):
accuracy in order 1 / order 2 / averaged over orders / swap-combined, positional agreement,
parse-failure rate and seconds per pair, with 95% bootstrap intervals. Two length columns: how
often the judge picks the longer output, and its accuracy on the pairs where people preferred
the shorter one. Each set also gets a "longer output wins" row: the accuracy of always picking
the longer output, the bar a judge must clear to show it reads more than length.

``--length-control regress|penalty:COEF`` adds, under each judge's row, the same judgments with
length controlled (``grm eval --length-control``; grm/evaluation/length_control.py): swap-combined
accuracy, picks-longer and the shorter-preferred accuracy; the order columns do not apply ("-").
``--saved`` builds the table from the eval directories already under --out without judging
(a missing directory is reported and skipped).

    python benchmarks/judge_quality.py                                  # defaults below
    python benchmarks/judge_quality.py --judges builtin:pairwise-logprob@qwen2.5-coder-0.5b-instruct --sets mt-bench
    python benchmarks/judge_quality.py --saved --length-control regress   # the saved runs, plus controlled rows
    python benchmarks/judge_quality.py --judges builtin:pairwise-rules-logprob@qwen2.5-coder-1.5b-instruct \
        --sets mt-bench,llmeval2 --dtype auto --length-control regress   # bf16 where the CPU is faster in it
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from machine import machine  # beside this file

if TYPE_CHECKING:
    from grm.evaluation.length_control import LengthControl

os.environ.setdefault("HF_HUB_OFFLINE", "1")
DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "human-preference"
DEFAULT_JUDGES = [
    f"builtin:{judge}@{model}"
    for model in ("smollm2-135m-instruct", "qwen2.5-coder-0.5b-instruct", "qwen2.5-coder-1.5b-instruct")
    for judge in ("pairwise-logprob", "pairwise-rules-logprob", "pointwise-logprob")
]


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}"


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def _ci(ci: list[float] | None) -> str:
    return "" if not ci else f" [{100 * ci[0]:.0f}, {100 * ci[1]:.0f}]"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--judges", default=",".join(DEFAULT_JUDGES), help="comma list of JUDGE[@MODEL]")
    ap.add_argument("--sets", default="mt-bench,llmeval2,faireval")
    ap.add_argument("--data-dir", default=str(DATA))
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--out", default="bench-out/judge-quality", help="eval dirs (resumable)")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--length-control", metavar="regress|penalty:COEF", help="also print length-controlled rows")
    ap.add_argument("--dtype", choices=["fp32", "bf16", "auto"], help="the judges' engine dtype (default: each judge's own)")
    ap.add_argument("--saved", action="store_true", help="read the eval dirs under --out; judge nothing")
    args = ap.parse_args()
    print(json.dumps(machine()), flush=True)
    if not Path(args.data_dir).is_dir():
        print(f"skipped: {args.data_dir} not found (the shared data sits beside the checkout, not in it)")
        return 0

    from grm.evaluation.length_control import parse_length_control
    from grm.evaluation.runner import EvalConfig, run

    try:
        control = parse_length_control(args.length_control) if args.length_control else None
    except ValueError as e:
        ap.error(f"--length-control {e}")

    rows = []
    for name in args.sets.split(","):
        rows.append(_length_baseline(name, Path(args.data_dir) / f"{name}.json", args.limit))
    for ref in args.judges.split(","):
        judge, _, model = ref.partition("@")
        overrides = [f"model={model}"] if model else []
        dtype = None
        if args.dtype:
            from grm.models.dtype import resolve_dtype

            dtype = resolve_dtype(args.dtype)
            overrides.append(f"engine.dtype={dtype}")
        for name in args.sets.split(","):
            data = Path(args.data_dir) / f"{name}.json"
            tag = f"{judge.replace('builtin:', '')}@{model or 'default'}@{name}" + (f"@{dtype}" if dtype else "")
            out = Path(args.out) / tag
            print(f"== {tag}", file=sys.stderr, flush=True)
            if args.saved:
                m = _saved(out, data, args.limit, control)
                if m is None:
                    print(f"skipped: no saved results in {out}", file=sys.stderr, flush=True)
                    continue
            else:
                cfg = EvalConfig(
                    judges=[judge],
                    data=str(data),
                    out=out,
                    limit=args.limit,
                    overrides=overrides,
                    batch_size=args.batch_size,
                    length_control=control,
                )
                m = run(cfg)
            jm = next(iter(m["judges"].values()))
            p = jm.get("pairs") or {}
            row = {
                "judge": judge.replace("builtin:", ""),
                "model": model or "default" if not dtype else f"{model or 'default'} ({dtype})",
                "set": name,
                "n": p.get("n"),
                "acc_order1": p.get("accuracy_order1"),
                "acc_order2": p.get("accuracy_order2"),
                "acc_average": p.get("accuracy_average"),
                "acc_average_ci95": p.get("accuracy_average_ci95"),
                "acc_swap_combined": p.get("accuracy_swap_combined"),
                "acc_swap_combined_ci95": p.get("accuracy_swap_combined_ci95"),
                "positional_agreement": p.get("positional_agreement"),
                "parse_failure_rate": jm["parse_failure_rate"],
                "picks_longer": (p.get("length") or {}).get("judge_longer_preferred"),
                "acc_shorter_preferred": (p.get("length") or {}).get("accuracy_shorter_preferred"),
                "acc_shorter_preferred_ci95": (p.get("length") or {}).get("accuracy_shorter_preferred_ci95"),
                "seconds_per_pair": 1 / jm["judgments_per_s"] if jm.get("judgments_per_s") else None,
            }
            print(json.dumps(row), flush=True)
            rows.append(row)
            lc = p.get("length_controlled")
            if lc:
                crow = {k: None for k in row} | {
                    "judge": f"{row['judge']} [{lc['method']}]",
                    "model": row["model"],
                    "set": name,
                    "n": lc["n"],
                    "acc_swap_combined": lc["accuracy_swap_combined"],
                    "acc_swap_combined_ci95": lc["accuracy_swap_combined_ci95"],
                    "parse_failure_rate": row["parse_failure_rate"],
                    "picks_longer": lc["length"].get("judge_longer_preferred"),
                    "acc_shorter_preferred": lc["length"].get("accuracy_shorter_preferred"),
                    "acc_shorter_preferred_ci95": lc["length"].get("accuracy_shorter_preferred_ci95"),
                    "slope_per_char": lc["slope_per_char"],
                }
                print(json.dumps(crow), flush=True)
                rows.append(crow)

    print(
        "\n| judge | model | set | n | acc order 1 | acc order 2 | acc avg [95% CI] | swap-combined [95% CI] "
        "| positional agreement | picks longer | acc, shorter preferred [95% CI] | parse failures | s/pair |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['judge']} | {r['model']} | {r['set']} | {r['n']} | {_pct(r['acc_order1'])} | {_pct(r['acc_order2'])} "
            f"| {_pct(r['acc_average'])}{_ci(r['acc_average_ci95'])} | {_pct(r['acc_swap_combined'])}{_ci(r['acc_swap_combined_ci95'])} "  # noqa: E501
            f"| {_pct(r['positional_agreement'])} | {_pct(r['picks_longer'])} "
            f"| {_pct(r['acc_shorter_preferred'])}{_ci(r['acc_shorter_preferred_ci95'])} | {_pct(r['parse_failure_rate'])} "
            f"| {_num(r['seconds_per_pair'])} |"
        )
    return 0


def _saved(out: Path, data: Path, limit: int | None, control: LengthControl | None) -> dict | None:
    """Metrics of a saved eval directory (its results.jsonl, the first ``limit`` items of ``data``)
    without loading a judge; None when it holds no results."""
    from grm.data.items import default_map, to_items
    from grm.data.sources import load_rows
    from grm.evaluation.judge_metrics import compute
    from grm.jsonl import read_jsonl

    lines = read_jsonl(out / "results.jsonl", repair=False)
    if not lines:
        return None
    rows = load_rows(str(data))
    items, _ = to_items(rows, default_map(str(data), set(rows[0])), str(data), skip_bad_rows=True)
    wanted = {it.id for it in items[:limit]}
    lines = [r for r in lines if r["item_id"] in wanted]
    return compute(lines, list(dict.fromkeys(r["judge"] for r in lines)), control)


def _length_baseline(name: str, path: Path, limit: int | None) -> dict:
    """The "judge" that always picks the longer output (equal lengths count as wrong)."""
    from grm.data.items import default_map, to_items
    from grm.data.sources import load_rows
    from grm.evaluation.metrics import accuracy, bootstrap_ci

    rows = load_rows(str(path))
    items, _ = to_items(rows, default_map(str(path), set(rows[0])), str(path), skip_bad_rows=True)
    pairs = [it for it in items if it.kind == "pair"][:limit]
    verdicts = [("1" if len(a) > len(b) else "2") if len(a) != len(b) else None for a, b in (it.responses for it in pairs)]
    labels = [it.label for it in pairs]
    acc = accuracy(verdicts, labels)
    ci = list(bootstrap_ci(lambda k: accuracy([verdicts[i] for i in k], [labels[i] for i in k]), len(pairs)))
    row = {
        "judge": "(longer output wins)",
        "model": "-",
        "set": name,
        "n": len(pairs),
        "acc_order1": acc,
        "acc_order2": acc,
        "acc_average": acc,
        "acc_average_ci95": ci,
        "acc_swap_combined": acc,
        "acc_swap_combined_ci95": ci,
        "positional_agreement": 1.0,
        "parse_failure_rate": 0.0,
        "picks_longer": 1.0,
        "acc_shorter_preferred": 0.0,
        "acc_shorter_preferred_ci95": None,
        "seconds_per_pair": None,
    }
    print(json.dumps(row), flush=True)
    return row


if __name__ == "__main__":
    sys.exit(main())
