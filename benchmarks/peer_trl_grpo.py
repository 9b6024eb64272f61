"""grm vs TRL's GRPOTrainer on the same judge-driven GRPO work, measured like for like.

The work (benchmarks/peer/grpo.yaml): SmolLM2-135M-Instruct as policy, frozen reference (KL 0.04,
k3, in the loss) and LLM judge (the builtin helpfulness-pointwise prompt, prefilled "Critique:",
one sample of up to 64 tokens at temperature 0.7, regex "Score: N", 1-10 mapped to [0, 1], no
retries); 8 prompts x 4 samples = 32 completions per step, 48 new tokens, lr 1e-6, fp32, the first
64 builtin arith prompts.

What is made equal (each was a difference once):
- TRL without gradient checkpointing (its GRPOConfig default turns it on) and with a constant
  learning rate (its default decays linearly to 0): grm runs neither.
- The judge samples at temperature 0.7 with top-k 0 and top-p 1 in both (transformers' own
  default is top-k 50) and the score is the last "Score: N" of prefill + text in both.
- An unparsed critique: grm masks the sample (advantage 0, out of its group's statistics); TRL's
  reward function gives it its group's mean parsed reward, so its advantage is 0 too (TRL itself
  would make it reward 0). The work per step is the same either way; both parse rates are printed.
- The same prompts in the same order: unshuffled in both, 8 per step.
- Step time = from one step's end to the next's, logging included, in both; a warm-up step and a
  last step run and are dropped (in async mode the last step has nothing to overlap).

TRL runs as one process with torch's default of all cores as threads, the judge generating a
step's 32 critiques in one batched ``model.generate`` call. Each system runs in its own
subprocess; ``--repeats`` runs of every system are interleaved (trl, grm-sync, grm-async, trl,
...). Peak RSS is the largest sum of resident memory over the subprocess tree (Ray's processes
included for grm), sampled every 0.2 s; peak PSS the largest sum of proportional set sizes, which counts a page
shared by several processes (libraries, mapped files) once in all, sampled every 5 s (reading a
4 GB process's PSS took 39 ms of a core here: every 0.2 s it would take ~30% of one). The floor of a
system is its step's FLOPs (``roofline.step_flops`` over the work it did: mean response and
judge lengths, each prompt computed once per group of 4 completions in prefill, reference and
training) at this machine's all-core fp32 GEMM rate (the work's dtype), and at its best rate
(bf16 on a CPU with AVX-512 BF16), both measured at the start (``roofline.gemm_gflops``); the fp32
floor with every completion's prompt computed (as TRL does) is printed too. Printed: the
machine (CPU model, every flag, torch), one JSON line per run, then per system the median and
min-max over repeats, its floor and multiple of it, its threads per process, and the ratios.

``--score logprob`` gives both systems a judge set-up whose every critique yields a score (SmolLM2
seldom writes "Score: N": 1.6% of grm's critiques parsed, 0% of TRL's): the critique as before,
then the expected score off the probabilities of "1".."10" after "\nScore: " (grm's
``helpfulness-pointwise-logprob``, whose reading TRL's reward function repeats: one prefill of the
critiqued prompt, the "10"'s second token on its KV cache, the log-probs renormalised over the ten).

    pip install -c constraints.txt 'grm-rlaif[peer]'     # TRL, for this benchmark only
    python benchmarks/peer_trl_grpo.py [--steps 3] [--repeats 3] [--systems trl,grm-sync,grm-async] [--set KEY=VALUE ...]
    python benchmarks/peer_trl_grpo.py --systems grm-async@REV,grm-async --repeats 2   # before/after
    python benchmarks/peer_trl_grpo.py --score logprob --steps 2 --repeats 2   # a judge that always scores
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from itertools import pairwise
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # roofline.py and machine.py, beside this file
from machine import machine  # noqa: E402

from grm.judges.render import render  # noqa: E402

PIPELINE = HERE / "peer" / "grpo.yaml"
PROMPTS, GROUP, NEW_TOKENS, BETA, LR = 8, 4, 48, 0.04, 1e-6
JUDGES = {  # --score: how a critique becomes a score, the same in both systems
    "text": "builtin:helpfulness-pointwise",  # the regex "Score: N" in the critique's text
    "logprob": "builtin:helpfulness-pointwise-logprob",  # the expected score after "\nScore: "
}
JUDGE_OVERRIDES = ["sampling.n=1", "sampling.max_new_tokens=64", "sampling.temperature=0.7", "on_failure.retries=0"]


# ----------------------------------------------------------------------------- TRL child
def run_trl(steps: int, score: str) -> dict:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from grm.data.builtin import arith_prompts
    from grm.judges.runtime import load
    from grm.judges.types import Sample
    from grm.models import resolve_model

    path = resolve_model("smollm2-135m-instruct")
    from grm.judges.parsers import expected_value, logprob_candidates

    judge = load(JUDGES[score], overrides=JUDGE_OVERRIDES)
    prefill = judge.spec.prefill or ""
    jtok = AutoTokenizer.from_pretrained(path)
    jtok.padding_side = "left"
    jmodel = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    if score == "text":
        pattern = re.compile(judge.spec.parser.pattern)
    else:  # the candidates as grm's parser reads them ("1".."10" after "\nScore: ", the split with fewest tokens)
        tokenize = lambda t: jtok(t, add_special_tokens=False)["input_ids"]  # noqa: E731
        prefix, cands, values = logprob_candidates(judge.spec.parser, "pointwise", tokenize)
        cand_ids = [tokenize(c) for c in cands]

    def read_scores(contexts: list[str]) -> list[float | None]:
        """The expected score after each context: the candidates' log-probs (a multi-token
        candidate's rest fed on the context's KV cache) renormalised over the candidates."""
        enc = jtok(contexts, return_tensors="pt", padding=True, add_special_tokens=False)
        attn = enc["attention_mask"]
        pos = (attn.cumsum(-1) - 1).clamp(min=0)
        with torch.inference_mode():
            o = jmodel(input_ids=enc["input_ids"], attention_mask=attn, position_ids=pos, use_cache=True)
            first = torch.log_softmax(o.logits[:, -1].float(), -1)
            lps = torch.stack([first[:, c[0]] for c in cand_ids], 1)  # [B, candidates]
            for k, c in enumerate(cand_ids):
                if len(c) > 1:  # e.g. "10": "1" then "0"
                    feed = torch.tensor([c[:-1]] * len(contexts))
                    mask = torch.cat([attn, torch.ones_like(feed)], 1)
                    at = pos[:, -1:] + 1 + torch.arange(len(c) - 1)[None, :]
                    rest = jmodel(input_ids=feed, attention_mask=mask, position_ids=at, past_key_values=o.past_key_values)
                    lp = torch.log_softmax(rest.logits.float(), -1).gather(-1, torch.tensor([c[1:]] * len(contexts))[..., None])
                    lps[:, k] += lp[..., 0].sum(-1)
                    o.past_key_values.crop(-(len(c) - 1))  # the candidate's tokens out again
        stats["judge_prompt_tokens"].append(float(attn.sum()) / len(contexts))  # the reading's prefill
        # grm's reading: the probability-weighted mean of the values; an unread candidate reads nothing
        return [expected_value(row, values) if all(map(math.isfinite, row)) else None for row in lps.tolist()]

    stats: dict[str, list] = {"judge_seconds": [], "parsed": [], "judge_prompt_tokens": [], "judge_new_tokens": []}

    def judge_reward(prompts, completions, **_):
        t0 = time.perf_counter()
        chats = []  # the judge's messages, the prefill open as the last assistant message
        for p, c in zip(prompts, completions, strict=False):
            s = Sample(prompt=p[-1]["content"], response=c[0]["content"] if isinstance(c, list) else c)
            (stage,) = [st for st in render(judge, s) if st["stage"] == "judge"]
            chats.append(stage["request"].messages)
        texts = [jtok.apply_chat_template(m, tokenize=False, continue_final_message=True) for m in chats]
        enc = jtok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        with torch.inference_mode():
            # grm's judge sampling: temperature 0.7 with neither top-k nor top-p (transformers' default is top-k 50)
            out = jmodel.generate(
                **enc, max_new_tokens=64, do_sample=True, temperature=0.7, top_k=0, top_p=1.0, pad_token_id=jtok.pad_token_id
            )
        new = out[:, enc["input_ids"].shape[1] :]
        stats["judge_prompt_tokens"].append(float(enc["attention_mask"].sum()) / len(texts))
        stats["judge_new_tokens"].append(float((new != jtok.pad_token_id).sum()) / len(texts))
        critiques = jtok.batch_decode(new, skip_special_tokens=True)
        if score == "text":  # grm's parse rule: the last "Score: N" on prefill + generated text
            found = [list(pattern.finditer(prefill + row)) for row in critiques]
            read = [float(f[-1].group(1)) if f else None for f in found]
        else:  # grm's reading: after the critique, "\nScore: " and the candidates' probabilities
            # the critique and the prefix appended to the open message, rendered as grm renders it
            opened = [
                [*m[:-1], {**m[-1], "content": m[-1]["content"] + row + prefix}] for m, row in zip(chats, critiques, strict=True)
            ]
            read = read_scores([jtok.apply_chat_template(m, tokenize=False, continue_final_message=True) for m in opened])
            stats["judge_prompt_tokens"][-2:] = [sum(stats["judge_prompt_tokens"][-2:])]  # both prefills, per completion
        scores = [(v - 1) / 9 if v is not None and 1 <= v <= 10 else None for v in read]
        stats["parsed"].append(sum(x is not None for x in scores) / len(scores))
        # grm masks an unparsed sample (advantage 0, out of its group's statistics); TRL's nansum would
        # make it reward 0 instead. Its group's mean parsed reward gives it advantage 0 here too.
        rewards = []
        for i in range(0, len(scores), GROUP):
            group = scores[i : i + GROUP]
            ok = [x for x in group if x is not None]
            fill = sum(ok) / len(ok) if ok else 0.0
            rewards += [fill if x is None else x for x in group]
        stats["judge_seconds"].append(time.perf_counter() - t0)
        return rewards

    ends: list[float] = []

    class Timer(TrainerCallback):
        """Step time as grm measures it: from one step's end to the next's (logging included)."""

        def on_train_begin(self, args, state, control, **kw):
            ends.append(time.perf_counter())

        def on_step_end(self, args, state, control, **kw):
            ends.append(time.perf_counter())

    # grm's prompt order: the first 64 arith prompts, unshuffled, 8 per step
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
        lr_scheduler_type="constant",  # grm's default (TRL's is a linear decay to 0)
        gradient_checkpointing=False,  # grm runs without it (TRL's default turns it on)
        shuffle_dataset=False,
        max_steps=steps + 2,
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
    steady = slice(1, -1)  # steady state: neither the warm-up step nor the last
    measured = [b - a for a, b in pairwise(ends)][steady]
    judge_s = stats["judge_seconds"][steady]
    lengths = [h["completions/mean_length"] for h in trainer.state.log_history if "completions/mean_length" in h][steady]
    med = statistics.median(measured)
    return {
        "system": "trl",
        "score": score,
        "threads": {"trainer+judge": torch.get_num_threads()},
        "steps": len(measured),
        "step_seconds": [round(s, 1) for s in measured],
        "median_step_s": round(med, 2),
        "completions_per_s": round(PROMPTS * GROUP / med, 4),
        "phases": {
            "judging": round(statistics.median(judge_s), 2) if judge_s else None,
            "everything_else": round(med - statistics.median(judge_s), 2) if judge_s else None,
        },
        "judge_parse_rate": round(statistics.mean(stats["parsed"][steady]), 3),
        "work": {
            "response_tokens": round(statistics.mean(lengths), 1),
            "judge_prompt_tokens": round(statistics.mean(stats["judge_prompt_tokens"][steady]), 1),
            "judge_new_tokens": round(statistics.mean(stats["judge_new_tokens"][steady]), 1),
        },
    }


# ----------------------------------------------------------------------------- grm child
def run_grm(steps: int, mode: str, score: str, overrides: list[str], keep: bool = False, checkout: str | None = None) -> dict:
    """``checkout``: run the grm package of another checkout (a git worktree of an older commit)
    on the same pipeline file, so before/after compare in one invocation."""
    out = Path(tempfile.mkdtemp(prefix=f"grm-peer-{mode}-")) / "run"
    cmd = [
        sys.executable,
        "-m",
        "grm",
        "run",
        str(PIPELINE),
        f"train.steps={steps + 2}",
        f"schedule.mode={mode}",
        f"out_dir={out}",
        *([] if score == "text" else [f"judges.0.spec={JUDGES[score]}"]),
        *([] if checkout else ["checkpoint.export=false"]),  # the model export after the run; an older grm lacks it
        *overrides,
    ]
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    if checkout:
        env["PYTHONPATH"] = checkout + os.pathsep + env.get("PYTHONPATH", "")
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=checkout)
    if r.returncode != 0:
        raise SystemExit(f"grm run failed:\n{r.stderr[-3000:]}")
    # steady state: neither the warm-up step nor the last (in async mode it has nothing to overlap)
    ms = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if x.strip()][1:-1]
    steps_kept = {m["step"] for m in ms}
    samples = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines() if x.strip()]
    name = JUDGES[score].removeprefix("builtin:")
    scores = [((s.get("judges") or {}).get(name) or {}).get("score") for s in samples if s["step"] in steps_kept]
    placement = json.loads((out / "placement.json").read_text())
    med = statistics.median(m["seconds_step"] for m in ms)
    phases = {
        k.removeprefix("seconds_"): round(statistics.median(m[k] for m in ms), 2)
        for k in ms[0]
        if k.startswith("seconds_") and k != "seconds_step"
    }
    n = PROMPTS * GROUP
    cost = f"judge_cost/{name}/"
    if not keep:  # checkpoints are ~1.6 GB per run
        shutil.rmtree(out.parent, ignore_errors=True)
    return {
        "system": f"grm-{mode}" + (f"@{checkout}" if checkout else ""),
        "score": score,
        "threads": {role: p.get("threads") for role, p in placement.items()},
        "steps": len(ms),
        "step_seconds": [round(m["seconds_step"], 1) for m in ms],
        "median_step_s": round(med, 2),
        "completions_per_s": round(n / med, 4),
        "phases": phases,
        "judge_parse_rate": round(sum(s is not None for s in scores) / max(1, len(scores)), 3),
        "work": {
            "response_tokens": round(statistics.mean(m["response_len_mean"] for m in ms), 1),
            "judge_prompt_tokens": round(statistics.mean(m[cost + "prompt_tokens"] for m in ms) / n, 1),
            "judge_new_tokens": round(statistics.mean(m[cost + "generated_tokens"] for m in ms) / n, 1),
        },
        "run_dir": str(out.parent) if keep else None,
        "overrides": overrides,
    }


# ----------------------------------------------------------------------------- parent
def _tree_rss(pid: int, pss: bool = False) -> tuple[int, int, dict[str, int]]:
    """Memory of ``pid`` and its descendants: (resident bytes, proportional set size bytes or 0
    unless ``pss``, resident bytes by process title). The resident sum counts a page shared by
    several processes (libtorch's code, the same file mapped twice) once per process; the PSS sum
    splits it among them, so it is what the processes take from the machine together. Reading PSS
    walks each process's page tables (``smaps_rollup``) and stalls its page faults meanwhile, so
    the caller reads it seldom."""
    import psutil

    try:
        p = psutil.Process(pid)
        procs = [p] + p.children(recursive=True)
    except psutil.NoSuchProcess:
        return 0, 0, {}
    by: dict[str, int] = {}
    total_pss = 0
    for q in procs:
        try:
            title = _title(q.cmdline() or [q.name()])
            by[title] = by.get(title, 0) + q.memory_info().rss
            total_pss += q.memory_full_info().pss if pss else 0
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return sum(by.values()), total_pss, by


def _title(cmdline: list[str]) -> str:
    """A process's name for the memory table: its program, and for a Python interpreter the script
    or module it runs (the driver and Ray's daemons all start from the same interpreter)."""
    name = cmdline[0].split("/")[-1][:40]
    if not name.startswith("python"):
        return name
    rest = [a for a in cmdline[1:] if a != "-u"]
    if rest[:1] == ["-m"] and len(rest) > 1:
        return f"{name} -m {rest[1]}"
    script = next((a for a in rest if a.endswith(".py")), None)
    return f"{name} {script.split('/')[-1]}" if script else name


def worktree(rev: str) -> str:
    """A git worktree of ``rev`` in a temp dir (removed at exit), for ``grm-MODE@REV`` systems."""
    import atexit

    path = tempfile.mkdtemp(prefix=f"grm-peer-{rev[:12]}-")
    subprocess.run(["git", "worktree", "add", "--detach", path, rev], cwd=HERE.parent, check=True, capture_output=True)
    atexit.register(lambda: subprocess.run(["git", "worktree", "remove", "--force", path], cwd=HERE.parent, capture_output=True))
    return path


def measure(
    system: str, steps: int, score: str, overrides: list[str], keep: bool = False, checkouts: dict[str, str] | None = None
) -> dict:
    extra = ["--score", score] + ([a for o in overrides for a in ("--set", o)] if system != "trl" else [])
    if "@" in system:
        extra += ["--checkout", (checkouts or {})[system.split("@", 1)[1]]]
    extra += ["--keep-runs"] if keep else []
    proc = subprocess.Popen(
        [sys.executable, __file__, "--child", system, "--steps", str(steps), *extra], stdout=subprocess.PIPE, text=True
    )
    peak: list = [0, {}]
    peak_pss = [0]
    stop = threading.Event()

    def sample() -> None:
        n = 0
        while not stop.is_set():
            total, pss, by = _tree_rss(proc.pid, pss=n % 25 == 0)  # RSS every 0.2 s, PSS every 5 s
            if total > peak[0]:
                peak[:] = [total, by]
            peak_pss[0] = max(peak_pss[0], pss)
            n += 1
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
    res["peak_pss_gb"] = round(peak_pss[0] / 2**30, 2)
    res["peak_rss_gb_by_process"] = {k: round(v / 2**30, 2) for k, v in sorted(peak[1].items(), key=lambda kv: -kv[1])}
    res["wall_s"] = round(time.perf_counter() - t0, 1)
    return res


def work_phases(work: dict, group: int = GROUP) -> dict[str, float]:
    """FLOPs by phase of one step of the work a system actually did (its mean response and judge
    lengths), by ``roofline.step_flops``; ``group``: completions sharing one computation of their
    prompt (the least work, the default; 1: each completion's prompt computed, as TRL does)."""
    from roofline import step_flops

    return step_flops(
        smollm2_config(),
        PROMPTS * GROUP,
        policy_prompt_tokens(),
        work["response_tokens"],
        work["judge_prompt_tokens"],
        work["judge_new_tokens"],
        group=group,
    )


def work_flops(work: dict, group: int = GROUP) -> float:
    """FLOPs of one step of that work, all phases."""
    return sum(work_phases(work, group).values())


@functools.cache
def smollm2_config() -> dict:
    from grm.models import resolve_model

    return json.load(open(os.path.join(resolve_model("smollm2-135m-instruct"), "config.json")))


@functools.cache
def policy_prompt_tokens() -> float:
    """Mean length of the 64 policy prompts with SmolLM2's chat template (what both systems prefill)."""
    from transformers import AutoTokenizer

    from grm.data.builtin import arith_prompts
    from grm.models import resolve_model

    tok = AutoTokenizer.from_pretrained(resolve_model("smollm2-135m-instruct"))
    rows = arith_prompts()[:64]
    # rendered to text, then encoded: transformers 5's tokenizing apply_chat_template returns a
    # dict (input_ids, attention_mask), whose len() is 2 (the floors printed before this fix used 2)
    texts = [
        tok.apply_chat_template([{"role": "user", "content": r["prompt"]}], tokenize=False, add_generation_prompt=True)
        for r in rows
    ]
    return statistics.mean(len(tok.encode(t, add_special_tokens=False)) for t in texts)


def gemm_rate() -> dict:
    """This machine's best GEMM rate on all cores (roofline.gemm_gflops at SmolLM2's shapes), fp32 and bf16."""
    import torch
    from roofline import gemm_gflops

    cores = os.cpu_count() or 1
    rates = {name: round(gemm_gflops(dt, cores), 1) for name, dt in (("fp32", torch.float32), ("bf16", torch.bfloat16))}
    one = round(gemm_gflops(torch.float32, 1), 1)
    torch.set_num_threads(cores)
    return {"gemm_gflops_all_cores": rates, "best": max(rates.values()), "fp32_gflops_1_thread": one}


PHASE_WORK = {
    "rollout": "rollout_decode",
    "judging": "judge_prefill_decode",
    "reference": "reference_forward",
    "training": "training_fwd_bwd",
}


def phase_table(rs: list[dict], rate: dict) -> dict:
    """Where a grm step's seconds go: per phase the median seconds over repeats, its FLOPs at the
    fp32 GEMM rate of the threads it ran with (one thread a pool in async mode, every core in sync
    mode), and the seconds beyond that; idle and sync as measured."""
    flops = work_phases(rs[0]["work"])
    threads = max(t or 1 for t in rs[0]["threads"].values())
    gflops = rate["fp32_gflops_1_thread"] if threads == 1 else rate["gemm_gflops_all_cores"]["fp32"]
    out: dict = {"threads": threads, "fp32_gflops": gflops}
    for phase in rs[0]["phases"]:
        secs = round(statistics.median(r["phases"][phase] for r in rs), 2)
        if phase in PHASE_WORK:
            at_rate = flops[PHASE_WORK[phase]] / (gflops * 1e9)
            out[phase] = {"s": secs, "gemm_s": round(at_rate, 2), "beyond_gemm_s": round(secs - at_rate, 2)}
        elif not phase.startswith("judge/"):
            out[phase] = {"s": secs}
    return out


def summary(system: str, rs: list[dict], rates: dict[str, float]) -> dict:
    """Median and min-max over a system's repeats (each repeat's own median step), with its floor:
    at the fp32 GEMM rate (the work runs in fp32 in both systems) and at the machine's best rate
    (bf16 where the CPU has AVX-512 BF16)."""
    med = [r["median_step_s"] for r in rs]
    step = statistics.median(med)
    flops = statistics.median(work_flops(r["work"]) for r in rs)
    floor, best = flops / (rates["fp32"] * 1e9), flops / (max(rates.values()) * 1e9)
    unshared = statistics.median(work_flops(r["work"], group=1) for r in rs) / (rates["fp32"] * 1e9)
    return {
        "system": system,
        "repeats": len(rs),
        "median_step_s": round(step, 2),
        "min_max_step_s": [min(med), max(med)],
        "completions_per_s": round(PROMPTS * GROUP / step, 4),
        "peak_rss_gb": statistics.median(r["peak_rss_gb"] for r in rs),
        "min_max_peak_rss_gb": [min(r["peak_rss_gb"] for r in rs), max(r["peak_rss_gb"] for r in rs)],
        "peak_pss_gb": statistics.median(r["peak_pss_gb"] for r in rs),
        "floor_fp32_s": round(floor, 2),
        "x_floor_fp32": round(step / floor, 2),
        "floor_best_rate_s": round(best, 2),
        "x_floor_best_rate": round(step / best, 2),
        "floor_fp32_prompt_per_completion_s": round(unshared, 2),
        "x_floor_fp32_prompt_per_completion": round(step / unshared, 2),
        "judge_parse_rate": round(statistics.median(r["judge_parse_rate"] for r in rs), 3),
        "threads": rs[0]["threads"],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--steps", type=int, default=3, help="steady-state steps per system (a warm-up step and a last one run too, not measured)"
    )
    ap.add_argument("--systems", default="trl,grm-sync,grm-async")
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override for grm's pipeline (repeatable), e.g. --set schedule.stream_prompts=8",
    )
    ap.add_argument(
        "--score",
        choices=sorted(JUDGES),
        default="text",
        help="the judge's score in both systems: text, the last 'Score: N' of the critique (SmolLM2 seldom writes one); "
        "logprob, the expected score off the candidates' probabilities after the critique and '\\nScore: '",
    )
    ap.add_argument("--keep-runs", action="store_true", help="keep grm's run directories (checkpoints, samples)")
    ap.add_argument("--repeats", type=int, default=3, help="runs of each system, interleaved (a, b, c, a, b, c, ...)")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--checkout", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        mode = args.child.split("@", 1)[0].removeprefix("grm-")
        if args.child == "trl":
            res = run_trl(args.steps, args.score)
        else:
            res = run_grm(args.steps, mode, args.score, args.set, args.keep_runs, args.checkout)
        print(json.dumps(res), flush=True)
        return 0
    print(json.dumps(machine()), flush=True)
    rate = gemm_rate()
    print(json.dumps(rate), flush=True)
    systems = args.systems.split(",")
    # grm-MODE@REV: grm as of git revision REV (e.g. grm-async@HEAD~3 beside grm-async): before/after in one invocation
    checkouts = {rev: worktree(rev) for rev in {s.split("@", 1)[1] for s in systems if "@" in s}}
    runs: dict[str, list[dict]] = {s: [] for s in systems}
    for _ in range(args.repeats):
        for system in systems:
            res = measure(system, args.steps, args.score, args.set, args.keep_runs, checkouts)
            runs[system].append(res)
            print(json.dumps(res), flush=True)
    results = {s: summary(s, rs, rate["gemm_gflops_all_cores"]) for s, rs in runs.items()}
    for s, r in results.items():
        if s != "trl":
            r["phase_table"] = phase_table(runs[s], rate)
        print(json.dumps(r), flush=True)
    pairs = [(s, "trl") for s in systems if s != "trl" and "trl" in results]
    pairs += [(s.split("@", 1)[0], s) for s in systems if "@" in s and s.split("@", 1)[0] in results]
    for a, b in pairs:
        ra, rb = results[a], results[b]
        print(
            json.dumps(
                {
                    "pair": f"{a} / {b}",
                    "completions_per_s": round(ra["completions_per_s"] / rb["completions_per_s"], 2),
                    "peak_rss": round(ra["peak_rss_gb"] / rb["peak_rss_gb"], 2),
                    "peak_pss": round(ra["peak_pss_gb"] / rb["peak_pss_gb"], 2),
                    # per unit of work: the systems' samples differ in length, so their steps' FLOPs do
                    "work_per_s": round(rb["x_floor_fp32"] / ra["x_floor_fp32"], 2),
                    # the step `a` would need for twice `b`'s completions/s
                    "step_s_for_2x": round(rb["median_step_s"] / 2, 2),
                }
            ),
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
