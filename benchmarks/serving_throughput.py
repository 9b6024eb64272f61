"""The same judge on the same items through the hf engine and through the openai engine against a
llama.cpp server (llama-cpp-python serving the store's GGUF, launched by the engine), judgments/s.

    .venv/bin/pip install -c constraints.txt -e '.[serving]'
    python benchmarks/serving_throughput.py [--judge builtin:helpfulness-pointwise] [--limit 32] [--threads 2]

Both get the same thread budget: torch threads for hf, llama.cpp ``--n_threads`` for the server
(the eval process itself then only does HTTP). Note the server runs the GGUF's quantized weights
while hf runs them dequantized to fp32, so outputs differ slightly.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from machine import machine  # beside this file

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--judge", default="builtin:helpfulness-pointwise")
    ap.add_argument("--data", default="builtin:arith-pairs")
    ap.add_argument("--limit", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--concurrency", type=int, default=4)
    args = ap.parse_args()
    print(json.dumps(machine()), flush=True)
    try:
        import llama_cpp.server  # noqa: F401
    except ImportError:
        print("skipped: needs the serving extra (pip install -e '.[serving]')")
        return 0

    from grm.evaluation.runner import EvalConfig, run

    launch = [
        sys.executable,
        "-m",
        "llama_cpp.server",
        "--model",
        "{gguf}",
        "--host",
        "127.0.0.1",
        "--port",
        "{port}",
        "--n_threads",
        str(args.threads),
        "--n_ctx",
        "4096",
        "--logits_all",
        "true",
    ]
    engines = {
        "hf": [f"engine={{type: hf, threads: {args.threads}}}"],
        "openai+llama.cpp": ["engine=" + json.dumps({"type": "openai", "launch": launch, "concurrency": args.concurrency})],
    }
    for name, overrides in engines.items():
        out = Path(tempfile.mkdtemp(prefix="grm-serving-bench-"))
        t0 = time.perf_counter()
        m = run(EvalConfig(judges=[args.judge], data=args.data, out=out, limit=args.limit, overrides=overrides))
        wall = time.perf_counter() - t0
        jm = next(iter(m["judges"].values()))
        print(
            json.dumps(
                {
                    "engine": name,
                    "judge": args.judge,
                    "items": jm["items"],
                    "wall_s_incl_startup": round(wall, 1),
                    "judgments_per_s": round(jm["judgments_per_s"], 3),
                    "parse_failure_rate": jm["parse_failure_rate"],
                    "tokens": jm["tokens"],
                }
            ),
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
