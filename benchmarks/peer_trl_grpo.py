"""grm vs TRL's GRPOTrainer on the same judge-driven GRPO work, measured side by side.

The work (benchmarks/peer/grpo.yaml): SmolLM2-135M-Instruct as policy, frozen reference (KL 0.04,
k3, in the loss) and LLM judge (the builtin helpfulness-pointwise prompt, prefilled "Critique:",
one sample of up to 64 tokens at temperature 0.7, regex "Score: N", 1-10 mapped to [0, 1], no
retries); 8 prompts x 4 samples = 32 completions per step, 48 new tokens, lr 1e-6, fp32, the first
64 builtin arith prompts. One warm-up step, then --steps measured steps, per system.

TRL gets its best CPU setup as we measured it: fp32 (bf16 matmuls run at ~half the fp32 rate on
this CPU), torch's default of all cores as threads (one process), the judge generating the whole
step's 32 critiques in one batched ``model.generate`` call with left padding.

Each system runs in its own subprocess, one after the other (trl, grm async, grm sync); peak RSS
is the largest sum of resident memory over the subprocess tree (Ray's processes included for
grm), sampled every 0.2 s. Prints one JSON line per system and the ratios.

    pip install -c constraints.txt 'grm-rlaif[peer]'     # TRL, for this benchmark only
    python benchmarks/peer_trl_grpo.py [--steps 3] [--systems trl,grm-async,grm-sync] [--set KEY=VALUE ...]
    python benchmarks/peer_trl_grpo.py --systems grm-async@REV,grm-async,grm-sync@REV,grm-sync --repeats 2   # before/after
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
HERE = Path(__file__).resolve().parent
PIPELINE = HERE / "peer" / "grpo.yaml"
PROMPTS, GROUP, NEW_TOKENS, BETA, LR = 8, 4, 48, 0.04, 1e-6


# ----------------------------------------------------------------------------- TRL child
def run_trl(steps: int) -> dict:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from grm.data.builtin import arith_prompts
    from grm.judges.runtime import load
    from grm.judges.types import Sample
    from grm.models import resolve_model

    path = resolve_model("smollm2-135m-instruct")
    judge = load("builtin:helpfulness-pointwise", overrides=["sampling.n=1", "sampling.max_new_tokens=64"])
    pattern = re.compile(judge.spec.parser.pattern)
    jtok = AutoTokenizer.from_pretrained(path)
    jtok.padding_side = "left"
    jmodel = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    stats = {"judge_seconds": [], "parsed": 0, "judged": 0}

    def judge_reward(prompts, completions, **_):
        t0 = time.perf_counter()
        texts = []
        for p, c in zip(prompts, completions, strict=False):
            s = Sample(prompt=p[-1]["content"], response=c[0]["content"] if isinstance(c, list) else c)
            (stage,) = [st for st in judge.render(s) if st["stage"] == "judge"]
            texts.append(jtok.apply_chat_template(stage["request"].messages, tokenize=False, continue_final_message=True))
        enc = jtok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        with torch.inference_mode():
            out = jmodel.generate(**enc, max_new_tokens=64, do_sample=True, temperature=0.7, pad_token_id=jtok.pad_token_id)
        rewards = []
        for row in jtok.batch_decode(out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True):
            m = pattern.search(row)
            v = float(m.group(1)) if m else None
            ok = v is not None and 1 <= v <= 10
            stats["judged"] += 1
            stats["parsed"] += ok
            rewards.append((v - 1) / 9 if ok else None)
        stats["judge_seconds"].append(time.perf_counter() - t0)
        return rewards

    step_s: list[float] = []

    class Timer(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            step_s.append(time.perf_counter() - self.t0)

    rows = [{"prompt": [{"role": "user", "content": r["prompt"]}]} for r in arith_prompts()[:64]]
    cfg = GRPOConfig(
        output_dir=tempfile.mkdtemp(prefix="trl-peer-"),
        use_cpu=True,
        bf16=False,
        fp16=False,
        per_device_train_batch_size=PROMPTS,
        gradient_accumulation_steps=GROUP,
        steps_per_generation=GROUP,
        num_generations=GROUP,
        max_completion_length=NEW_TOKENS,
        temperature=1.0,
        beta=BETA,
        learning_rate=LR,
        max_steps=steps + 1,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        seed=0,
        dataloader_num_workers=0,
    )
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(path)
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[judge_reward],
        args=cfg,
        train_dataset=Dataset.from_list(rows),
        processing_class=tok,
        callbacks=[Timer()],
    )
    trainer.train()
    measured = step_s[1:]
    judge_s = stats["judge_seconds"][1:]
    med = statistics.median(measured)
    return {
        "system": "trl",
        "threads": torch.get_num_threads(),
        "steps": len(measured),
        "step_seconds": [round(s, 1) for s in measured],
        "median_step_s": round(med, 2),
        "completions_per_s": round(PROMPTS * GROUP / med, 4),
        "phases": {
            "judging": round(statistics.median(judge_s), 2) if judge_s else None,
            "everything_else": round(med - statistics.median(judge_s), 2) if judge_s else None,
        },
        "judge_parse_rate": round(stats["parsed"] / max(1, stats["judged"]), 3),
    }


# ----------------------------------------------------------------------------- grm child
def run_grm(steps: int, mode: str, overrides: list[str], keep: bool = False, checkout: str | None = None) -> dict:
    """``checkout``: run the grm package of another checkout (a git worktree of an older commit)
    on the same pipeline file, so before/after compare in one invocation."""
    out = Path(tempfile.mkdtemp(prefix=f"grm-peer-{mode}-")) / "run"
    cmd = [
        sys.executable,
        "-m",
        "grm",
        "run",
        str(PIPELINE),
        f"train.steps={steps + 1}",
        f"schedule.mode={mode}",
        f"out_dir={out}",
        *overrides,
    ]
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    if checkout:
        env["PYTHONPATH"] = checkout + os.pathsep + env.get("PYTHONPATH", "")
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=checkout)
    if r.returncode != 0:
        raise SystemExit(f"grm run failed:\n{r.stderr[-3000:]}")
    ms = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if x.strip()][1:]
    samples = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines() if x.strip()]
    scores = [((s.get("judges") or {}).get("helpfulness-pointwise") or {}).get("score") for s in samples]
    med = statistics.median(m["seconds_step"] for m in ms)
    phases = {
        k.removeprefix("seconds_"): round(statistics.median(m[k] for m in ms), 2)
        for k in ms[0]
        if k.startswith("seconds_") and k != "seconds_step"
    }
    if not keep:  # checkpoints are ~1.6 GB per run
        shutil.rmtree(out.parent, ignore_errors=True)
    return {
        "system": f"grm-{mode}" + (f"@{checkout}" if checkout else ""),
        "steps": len(ms),
        "step_seconds": [round(m["seconds_step"], 1) for m in ms],
        "median_step_s": round(med, 2),
        "completions_per_s": round(PROMPTS * GROUP / med, 4),
        "phases": phases,
        "judge_parse_rate": round(sum(s is not None for s in scores) / max(1, len(scores)), 3),
        "run_dir": str(out.parent) if keep else None,
        "overrides": overrides,
    }


# ----------------------------------------------------------------------------- parent
def _tree_rss(pid: int) -> tuple[int, dict[str, int]]:
    """Resident bytes of ``pid`` and its descendants: (total, by process title)."""
    import psutil

    try:
        p = psutil.Process(pid)
        procs = [p] + p.children(recursive=True)
    except psutil.NoSuchProcess:
        return 0, {}
    by: dict[str, int] = {}
    for q in procs:
        try:
            title = (q.cmdline() or [q.name()])[0].split("/")[-1][:40]
            by[title] = by.get(title, 0) + q.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return sum(by.values()), by


def worktree(rev: str) -> str:
    """A git worktree of ``rev`` in a temp dir (removed at exit), for ``grm-MODE@REV`` systems."""
    import atexit

    path = tempfile.mkdtemp(prefix=f"grm-peer-{rev[:12]}-")
    subprocess.run(["git", "worktree", "add", "--detach", path, rev], cwd=HERE.parent, check=True, capture_output=True)
    atexit.register(lambda: subprocess.run(["git", "worktree", "remove", "--force", path], cwd=HERE.parent, capture_output=True))
    return path


def measure(system: str, steps: int, overrides: list[str], keep: bool = False, checkouts: dict[str, str] | None = None) -> dict:
    extra = [a for o in overrides for a in ("--set", o)] if system != "trl" else []
    if "@" in system:
        extra += ["--checkout", (checkouts or {})[system.split("@", 1)[1]]]
    extra += ["--keep-runs"] if keep else []
    proc = subprocess.Popen(
        [sys.executable, __file__, "--child", system, "--steps", str(steps), *extra], stdout=subprocess.PIPE, text=True
    )
    peak: list = [0, {}]
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            total, by = _tree_rss(proc.pid)
            if total > peak[0]:
                peak[:] = [total, by]
            time.sleep(0.2)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    t0 = time.perf_counter()
    out, _ = proc.communicate()
    stop.set()
    t.join()
    if proc.returncode != 0:
        raise SystemExit(f"{system} failed (exit {proc.returncode})")
    res = json.loads(out.strip().splitlines()[-1])
    res["peak_rss_gb"] = round(peak[0] / 2**30, 2)
    res["peak_rss_gb_by_process"] = {k: round(v / 2**30, 2) for k, v in sorted(peak[1].items(), key=lambda kv: -kv[1])}
    res["wall_s"] = round(time.perf_counter() - t0, 1)
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=3, help="measured steps per system (after one warm-up step)")
    ap.add_argument("--systems", default="trl,grm-async,grm-sync")
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override for grm's pipeline (repeatable), e.g. --set schedule.stream_prompts=8",
    )
    ap.add_argument("--keep-runs", action="store_true", help="keep grm's run directories (checkpoints, samples)")
    ap.add_argument("--repeats", type=int, default=1, help="runs of each system, interleaved (a, b, a, b, ...)")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--checkout", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        mode = args.child.split("@", 1)[0].removeprefix("grm-")
        res = run_trl(args.steps) if args.child == "trl" else run_grm(args.steps, mode, args.set, args.keep_runs, args.checkout)
        print(json.dumps(res), flush=True)
        return 0
    import platform

    cpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model = next((ln.split(":", 1)[1].strip() for ln in cpu.splitlines() if ln.startswith("Model name")), platform.processor())
    flags = next((ln.split(":", 1)[1].split() for ln in cpu.splitlines() if ln.startswith("Flags")), [])
    print(
        json.dumps({"cpu": model, "avx512": sorted(f for f in flags if f.startswith("avx512")), "cores": os.cpu_count()}),
        flush=True,
    )
    systems = args.systems.split(",")
    # grm-MODE@REV: grm as of git revision REV (e.g. grm-async@HEAD~3 beside grm-async): before/after in one invocation
    checkouts = {rev: worktree(rev) for rev in {s.split("@", 1)[1] for s in systems if "@" in s}}
    runs: dict[str, list[dict]] = {s: [] for s in systems}
    for _ in range(args.repeats):
        for system in systems:
            res = measure(system, args.steps, args.set, args.keep_runs, checkouts)
            runs[system].append(res)
            print(json.dumps(res), flush=True)
    results = {
        s: min(rs, key=lambda r: r["median_step_s"])
        if len(rs) == 1
        else {
            **rs[0],
            "median_step_s": round(statistics.median(r["median_step_s"] for r in rs), 2),
            "completions_per_s": round(statistics.median(r["completions_per_s"] for r in rs), 4),
            "peak_rss_gb": max(r["peak_rss_gb"] for r in rs),
            "median_step_s_runs": [r["median_step_s"] for r in rs],
        }
        for s, rs in runs.items()
    }
    for s, rs in runs.items():
        if len(rs) > 1:
            print(
                json.dumps(
                    {
                        "system": s,
                        "median_step_s_over_repeats": results[s]["median_step_s"],
                        "runs": results[s]["median_step_s_runs"],
                    }
                ),
                flush=True,
            )
    for s in systems:
        if "@" in s and s.split("@", 1)[0] in results:
            now = s.split("@", 1)[0]
            print(
                json.dumps(
                    {
                        "ratio": f"{now}/{s} step time",
                        "value": round(results[now]["median_step_s"] / results[s]["median_step_s"], 3),
                    }
                ),
                flush=True,
            )
    if "trl" in results:
        for k, r in results.items():
            if k != "trl":
                print(
                    json.dumps(
                        {
                            "ratio": f"{k}/trl",
                            "completions_per_s": round(r["completions_per_s"] / results["trl"]["completions_per_s"], 2),
                            "peak_rss": round(r["peak_rss_gb"] / results["trl"]["peak_rss_gb"], 2),
                        }
                    )
                )
    if "grm-async" in results and "grm-sync" in results:
        print(
            json.dumps(
                {
                    "ratio": "grm sync/async step time",
                    "value": round(results["grm-sync"]["median_step_s"] / results["grm-async"]["median_step_s"], 2),
                }
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
