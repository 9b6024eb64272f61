"""The `grm run` driver's own memory: peak RSS of the driver process (not Ray's, not the actors'),
whether it imported torch, and the run's seconds, for the current checkout and optionally another
tree of grm side by side in one invocation (#44, a lighter driver).

Each system runs the same pipeline (default: the quickstart, sync, a few small steps) as
``python -m grm run ...`` under a wrapper that prints the process's peak RSS (``VmHWM``) and
``"torch" in sys.modules`` at exit; ``--tree DIR`` runs grm from DIR instead (PYTHONPATH, so its
Ray workers run that tree too), e.g. a ``git worktree`` of an earlier commit. Repeats alternate the
systems; medians are printed. Run directories go under a temporary directory, deleted after.

    python benchmarks/driver_memory.py --tree /tmp/old --repeats 2
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
from pathlib import Path

from machine import machine  # beside this file

ROOT = Path(__file__).resolve().parents[1]
SMALL = [
    "algorithm.prompts_per_step=2",
    "algorithm.group_size=2",
    "rollout.max_new_tokens=12",
    "train.micro_batch_size=2",
    "judges.0.overrides=[sampling.max_new_tokens=12]",
    "checkpoint.export=false",
]
# VmHWM, the peak of this program's own memory: ru_maxrss would start from the peak of the process
# that spawned it (Linux carries it across exec; grm.process.peak_rss_mb says more).
WRAPPER = (
    "import atexit, sys\n"
    "def report():\n"
    "    hwm = next(ln.split()[1] for ln in open('/proc/self/status') if ln.startswith('VmHWM:'))\n"
    "    print('DRIVER', hwm, 'torch' in sys.modules, flush=True)\n"
    "atexit.register(report)\n"
    "from grm.cli import main\n"
    "sys.exit(main())\n"
)


def run_once(tree: Path | None, pipeline: str, steps: int, extra: list[str], out: Path) -> dict[str, float | bool]:
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "HF_HUB_OFFLINE": "1"}
    if tree is not None:
        env["PYTHONPATH"] = f"{tree}{os.pathsep}{env.get('PYTHONPATH', '')}".rstrip(os.pathsep)
    args = ["run", pipeline, f"out_dir={out}", f"train.steps={steps}", *SMALL, *extra]
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-c", WRAPPER, *args], capture_output=True, text=True, env=env, cwd=tree or ROOT)
    seconds = time.perf_counter() - t0
    line = next((ln for ln in r.stdout.splitlines() if ln.startswith("DRIVER ")), None)
    if r.returncode != 0 or line is None:
        raise SystemExit(f"grm run failed ({r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}")
    _, kib, torch_loaded = line.split()
    return {"peak_rss_mb": int(kib) / 1024, "torch": torch_loaded == "True", "seconds": seconds}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tree", type=Path, default=None, help="another grm tree to run beside this checkout")
    ap.add_argument("--pipeline", default="builtin:quickstart")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("overrides", nargs="*", help="KEY=VALUE overrides for every run")
    args = ap.parse_args()
    print(json.dumps(machine()), flush=True)
    systems: dict[str, Path | None] = {"this checkout": None}
    if args.tree is not None:
        systems[f"tree {args.tree}"] = args.tree.resolve()
    rows: dict[str, list[dict[str, float | bool]]] = {k: [] for k in systems}
    with tempfile.TemporaryDirectory(prefix="driver-memory-") as tmp:
        for rep in range(args.repeats):
            for name, tree in systems.items():
                out = Path(tmp) / f"{rep}-{len(rows[name])}-{tree is None}"
                got = run_once(tree, args.pipeline, args.steps, args.overrides, out)
                rows[name].append(got)
                print(f"{name}, repeat {rep + 1}: {json.dumps(got)}", flush=True)
    print(f"\n{args.pipeline}, {args.steps} steps, {args.repeats} repeat(s); medians")
    print("| system | driver peak RSS (MiB) | driver imported torch | run seconds |")
    print("|---|---|---|---|")
    for name, rs in rows.items():
        rss = statistics.median(float(r["peak_rss_mb"]) for r in rs)
        secs = statistics.median(float(r["seconds"]) for r in rs)
        print(f"| {name} | {rss:.0f} | {'yes' if any(r['torch'] for r in rs) else 'no'} | {secs:.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
