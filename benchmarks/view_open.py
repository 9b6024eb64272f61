"""How fast `grm view` opens a large run: index a synthetic 100k-line samples.jsonl, then serve the
first page of one step over HTTP (the real server, the real handler).

Rows are shaped like the recorder's (grm/orchestrator/recorder.py sample_rows): a prompt, a
~60-word response, two judges with a ~70-word critique each; about 1.4 KB per line. 500 steps of
200 responses (50 prompts x 4) = 100k lines. Prints one JSON line:

    python benchmarks/view_open.py [--lines 100000] [--per-step 200]

The file is written to a temporary directory and deleted afterwards.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from machine import machine  # beside this file

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

WORDS = "the answer is because we add carry sum digits first then result so total number seven twelve".split()


def text(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def write_samples(path: Path, lines: int, per_step: int, group: int = 4) -> None:
    rng = random.Random(0)
    with open(path, "w") as fh:
        for i in range(lines):
            step, k = i // per_step + 1, i % per_step
            reward = rng.random()
            judges = {
                name: {
                    "score": reward * 10,
                    "reward": reward,
                    "masked": False,
                    "critiques": ["Critique: " + text(rng, 70)],
                    "parsed": [reward * 10],
                }
                for name in ("helpfulness-pointwise-logprob", "numeric-answer")
            }
            row = {
                "step": step,
                "id": f"{step}-{k}",
                "prompt_id": f"p{k // group}",
                "group": f"{step}:{k // group}",
                "prompt": "What is 17 + 25? Explain your reasoning step by step.",
                "response": text(rng, 60),
                "finish_reason": "stop",
                "policy_version": step - 1,
                "reward": reward,
                "advantage": reward - 0.5,
                "judges": judges,
            }
            fh.write(json.dumps(row) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lines", type=int, default=100_000)
    ap.add_argument("--per-step", type=int, default=200)
    args = ap.parse_args()
    print(json.dumps(machine()), flush=True)

    from grm.view.server import start_in_thread

    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        run.mkdir()
        (run / "config.resolved.yaml").write_text("name: bench\nalgorithm: {type: grpo}\n")
        (run / "metrics.jsonl").write_text("")
        t0 = time.perf_counter()
        write_samples(run / "samples.jsonl", args.lines, args.per_step)
        write_s = time.perf_counter() - t0
        size = (run / "samples.jsonl").stat().st_size

        httpd, url = start_in_thread([str(run)])
        try:
            t0 = time.perf_counter()
            with urllib.request.urlopen(url + "api/d/0/info") as r:  # the first request indexes the file
                steps = json.loads(r.read())["steps"]
            index_s = time.perf_counter() - t0
            mid = steps[len(steps) // 2]
            t0 = time.perf_counter()
            with urllib.request.urlopen(url + f"api/d/0/samples?step={mid}") as r:
                page = json.loads(r.read())
            page_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            with urllib.request.urlopen(url + "api/d/0/info") as r:  # nothing appended: a stat and no scan
                r.read()
            refresh_s = time.perf_counter() - t0
        finally:
            httpd.shutdown()
            httpd.server_close()
    print(
        json.dumps(
            {
                "lines": args.lines,
                "bytes": size,
                "bytes_per_line": round(size / args.lines),
                "steps": len(steps),
                "write_seconds": round(write_s, 2),
                "index_seconds": round(index_s, 3),
                "first_page_seconds": round(page_s, 3),
                "open_seconds": round(index_s + page_s, 3),
                "refresh_seconds": round(refresh_s, 4),
                "page_groups": len(page["groups"]),
                "step_rows": page["rows"],
            }
        )
    )


if __name__ == "__main__":
    main()
