"""A tiny real ``grm run`` in a given source tree, and a field-by-field comparison of two runs'
``samples.jsonl``: run it on a copy of the commit before a refactor of the orchestrator and on the
tree after, so "every pipeline's samples identical" is a diff, not a claim.

The pipeline is the shipped quickstart (SmolLM2 policy, the SmolLM2 ``helpfulness-pointwise-logprob``
model judge on its own pool, the ``numeric-answer`` rule verifier in the driver) cut to 2 steps of
2 prompts x 4 responses of at most 16 tokens, torch trainer, fixed seed 0. Variants:

- ``sync``: sync mode with ``algorithm.dynamic_filtering`` (the refill path);
- ``async``: async mode, ``max_staleness: 1`` (the batch pass beside the judges, rollouts ahead),
  each process on its pool's threads (``overlap_threads: pool``; lent cores make a judge's
  log-prob scores differ in the 7th digit between two runs of one tree);
- ``refill``: sync, dynamic filtering, the ``length-longer`` rule judge alone on 2 responses of 3
  tokens (4 prompts a step), so some groups are dropped and refilled (the kept batch differs from the first).

    python benchmarks/sample_parity.py run --tree /tmp/before --out /tmp/runs/before-sync --variant sync
    python benchmarks/sample_parity.py run --tree . --out /tmp/runs/after-sync --variant sync
    python benchmarks/sample_parity.py compare /tmp/runs/before-sync /tmp/runs/after-sync

``run`` starts the run with ``PYTHONPATH=TREE`` and the tree as working directory, and first checks
that ``import grm`` resolves inside the tree both here and in a Ray worker. ``compare`` prints every
sample field that differs (wall-time fields ignored) and, as a second opinion, the metrics that
differ; it exits 1 when a sample differs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

SMALL = [
    "train.steps=2",
    "seed=0",
    "algorithm.prompts_per_step=2",
    "algorithm.group_size=4",
    "rollout.max_new_tokens=16",
    "train.micro_batch_size=4",
    "train.backend.type=torch",
    "checkpoint.every=0",
    "judges.0.overrides=[sampling.max_new_tokens=16]",
]
VARIANTS = {
    "sync": ["schedule.mode=sync", "algorithm.dynamic_filtering=true"],
    # fixed threads per process: with the default ``overlap_threads: lend`` a process takes idle
    # cores when it reads the ledger, so its thread count (and a judge's last float bits) follows timing
    "async": ["schedule.mode=async", "schedule.max_staleness=1", "schedule.overlap_threads=pool"],
    # the rule judge alone on 2-response groups of at most 4 tokens: some groups flat, some not, so
    # dynamic filtering drops groups and refills (the batch changes)
    "refill": [
        "schedule.mode=sync",
        "algorithm.dynamic_filtering=true",
        "pools={train: {cpus: 2}}",
        "judges=[{spec: builtin:length-longer, weight: 1.0}]",
        "algorithm.group_size=2",
        "rollout.max_new_tokens=3",
        "algorithm.prompts_per_step=4",
    ],
}
ENV = {"OMP_NUM_THREADS": "1", "RAY_AUTH_MODE": "disabled", "HF_HUB_OFFLINE": "1", "RAY_DEDUP_LOGS": "0"}

WALL_TIME = ("seconds", "judge_share", "threads_")
"""Keys holding wall time or the thread counts it chose: they differ between identical runs."""

RAY_CHECK = (
    "import ray, grm; ray.init(num_cpus=1, include_dashboard=False);"
    "f = ray.remote(lambda: __import__('grm').__file__);"
    "print(grm.__file__); print(ray.get(f.remote())); ray.shutdown()"
)


def _env(tree: Path) -> dict[str, str]:
    return {**os.environ, **ENV, "PYTHONPATH": str(tree)}


def check_tree(tree: Path) -> None:
    """Exit unless ``grm`` imports from ``tree`` in this environment and in a Ray worker."""
    r = subprocess.run([sys.executable, "-c", RAY_CHECK], cwd=tree, env=_env(tree), capture_output=True, text=True, timeout=300)
    files = [x for x in r.stdout.splitlines() if x.endswith("__init__.py")]
    want = str(tree / "grm" / "__init__.py")
    if r.returncode != 0 or len(files) != 2 or any(f != want for f in files):
        sys.exit(f"grm does not resolve to {want} (driver, worker): {files}\n{r.stderr[-2000:]}")
    print(f"grm resolves to {want} in the driver and in a Ray worker", flush=True)


def no_export(tree: Path) -> list[str]:
    """``checkpoint.export=false`` where the tree's grm has the field (an older tree refuses it): the
    model export after a run is no part of what this compares."""
    probe = [sys.executable, "-m", "grm", "validate", "builtin:quickstart", "--set", "checkpoint.export=false"]
    r = subprocess.run(probe, cwd=tree, env=_env(tree), capture_output=True, text=True, timeout=300)
    return ["checkpoint.export=false"] if r.returncode == 0 else []


def run(tree: Path, out: Path, variant: str) -> None:
    tree = tree.resolve()
    check_tree(tree)
    if out.exists():
        sys.exit(f"{out} exists: give a new run directory")
    args = ["run", "builtin:quickstart", f"out_dir={out.resolve()}", *SMALL, *VARIANTS[variant], *no_export(tree), "--no-live"]
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "grm", *args], cwd=tree, env=_env(tree), capture_output=True, text=True)
    print(r.stdout[-1500:])
    if r.returncode != 0:
        sys.exit(f"grm run failed ({r.returncode}):\n{r.stderr[-4000:]}")
    print(json.dumps({"tree": str(tree), "variant": variant, "out": str(out), "seconds": round(time.perf_counter() - t0, 1)}))


def _rows(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        sys.exit(f"{path}: no such file (not a run directory, or its run has not finished)")
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def _flat(x: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dicts and lists as ``a.b.0.c`` -> leaf value."""
    if isinstance(x, dict):
        return {k: v for key, val in x.items() for k, v in _flat(val, f"{prefix}{key}.").items()}
    if isinstance(x, list):
        return {k: v for i, val in enumerate(x) for k, v in _flat(val, f"{prefix}{i}.").items()}
    return {prefix.rstrip("."): x}


def _volatile(key: str) -> bool:
    return any(w in part for part in key.split(".") for w in WALL_TIME)


def _field(key: str) -> str:
    """A flat key without list indices: the field it belongs to (``judges.NAME.critiques``)."""
    return ".".join(p for p in key.split(".") if not p.isdigit())


def diff(a: list[dict[str, Any]], b: list[dict[str, Any]], by: str) -> tuple[dict[str, int], list[str]]:
    """(field -> rows where it differs, a few examples) between two lists of rows matched by ``by``."""
    keyed_a, keyed_b = ({str(r.get(by)): r for r in rows} for rows in (a, b))
    fields: dict[str, int] = {}
    examples: list[str] = []
    for k in sorted(set(keyed_a) | set(keyed_b)):
        if k not in keyed_a or k not in keyed_b:
            fields["<row missing>"] = fields.get("<row missing>", 0) + 1
            examples.append(f"{by}={k}: only in {'first' if k in keyed_a else 'second'}")
            continue
        fa, fb = _flat(keyed_a[k]), _flat(keyed_b[k])
        seen = set()
        for key in sorted(set(fa) | set(fb)):
            if _volatile(key) or _same(fa.get(key, "<absent>"), fb.get(key, "<absent>")):
                continue
            name = _field(key)
            if name not in seen:
                seen.add(name)
                fields[name] = fields.get(name, 0) + 1
            if len(examples) < 12:
                examples.append(f"{by}={k} {key}: {str(fa.get(key, '<absent>'))[:80]!r} vs {str(fb.get(key, '<absent>'))[:80]!r}")
    return fields, examples


def _same(x: Any, y: Any) -> bool:
    return x == y or (isinstance(x, float) and isinstance(y, float) and x != x and y != y)  # NaN == NaN here


def compare(a: Path, b: Path) -> int:
    sa, sb = _rows(a / "samples.jsonl"), _rows(b / "samples.jsonl")
    fields, examples = diff(sa, sb, "id")
    print(f"samples: {len(sa)} vs {len(sb)} rows")
    if fields:
        print("samples differ in: " + ", ".join(f"{k} ({n} rows)" for k, n in sorted(fields.items())))
        print("\n".join("  " + e for e in examples))
    else:
        print("samples identical (wall-time fields ignored)")
    mfields, mexamples = diff(_rows(a / "metrics.jsonl"), _rows(b / "metrics.jsonl"), "step")
    if mfields:
        print("metrics differ in: " + ", ".join(sorted(mfields)))
        print("\n".join("  " + e for e in mexamples))
    else:
        print("metrics identical (wall-time fields ignored)")
    return 1 if fields else 0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="a tiny quickstart run with the grm of --tree")
    r.add_argument("--tree", type=Path, required=True, help="source tree holding grm/ and pipelines/")
    r.add_argument("--out", type=Path, required=True, help="new run directory")
    r.add_argument("--variant", choices=sorted(VARIANTS), default="sync")
    c = sub.add_parser("compare", help="compare two runs' samples.jsonl (and metrics.jsonl)")
    c.add_argument("a", type=Path)
    c.add_argument("b", type=Path)
    args = p.parse_args()
    if args.cmd == "run":
        run(args.tree, args.out, args.variant)
    else:
        sys.exit(compare(args.a, args.b))


if __name__ == "__main__":
    main()
