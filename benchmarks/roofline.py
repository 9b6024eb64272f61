"""This machine's matmul rate and the compute-bound floor for one step of the judge-driven GRPO
work in benchmarks/peer_trl_grpo.py, so measured step times can be stated as a multiple of it.

Measures fp32 and bf16 GEMM GFLOP/s at SmolLM2's linear-layer shapes on 1 thread and on all
cores, then counts the FLOPs of one step: policy decode, judge prefill + decode, reference forward
and training forward + backward (3x forward), plus a separate old-log-prob forward with
--old-logprob-forward, using the model's config. Attention FLOPs are included (4 * layers * hidden * context per token).

    python benchmarks/roofline.py
        [--prompts 8 --group 4 --new-tokens 48 --prompt-tokens 40 --judge-prompt-tokens 330 --judge-new-tokens 64]
                                  [--measured grm-async=80.9,trl=73.9]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from machine import machine  # beside this file

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def gemm_gflops(dtype, threads: int, m: int = 1024, k: int = 576, n: int = 1536, seconds: float = 2.0) -> float:
    import torch

    torch.set_num_threads(threads)
    a, b = torch.randn(m, k, dtype=dtype), torch.randn(k, n, dtype=dtype)
    for _ in range(3):
        a @ b
    reps, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        a @ b
        reps += 1
    return 2 * m * k * n * reps / (time.perf_counter() - t0) / 1e9


def forward_flops(cfg: dict, tokens: int, context: int, logits_tokens: int) -> float:
    """FLOPs of a forward over ``tokens`` positions attending to ``context`` positions on average."""
    h, L, inter, vocab = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["intermediate_size"], cfg["vocab_size"]
    heads, kv = cfg["num_attention_heads"], cfg.get("num_key_value_heads", cfg["num_attention_heads"])
    hd = h // heads
    per_layer = 2 * (h * heads * hd + 2 * h * kv * hd + heads * hd * h) + 2 * 3 * h * inter  # qkvo + gated MLP
    attn = 4 * heads * hd * context  # QK^T and AV
    return tokens * L * (per_layer + attn) + 2 * h * vocab * logits_tokens


def step_flops(
    cfg: dict,
    completions: int,
    prompt_tokens: float,
    new_tokens: float,
    judge_prompt_tokens: float,
    judge_new_tokens: float,
    judge_samples: int = 1,
    old_logprob_forward: bool = False,
    group: int = 1,
) -> dict[str, float]:
    """FLOPs of one step by phase: policy decode (prefill + one forward per new token), judge
    prefill + decode, reference forward, training forward + backward (3x forward), and an
    old-log-prob forward when asked for. ``group``: completions per prompt whose prompt is computed
    once (prefill, reference, training); 1 counts every completion's prompt."""
    B, P, T = completions, prompt_tokens, new_tokens
    J, JT = judge_prompt_tokens, judge_new_tokens
    seq = P + T
    steps = max(1, round(T))

    def whole_rows() -> float:
        """One forward over every completion with its prompt (log-probs over the response)."""
        if group <= 1:
            return B * forward_flops(cfg, seq, seq / 2, T)
        return B / group * forward_flops(cfg, P, P / 2, 0) + B * forward_flops(cfg, T, P + T / 2, T)

    return {
        "rollout_decode": B * sum(forward_flops(cfg, 1, P + t, 1) for t in range(steps))
        + B / max(1, group) * forward_flops(cfg, P, P / 2, 1),
        "judge_prefill_decode": B * judge_samples * (forward_flops(cfg, J, J / 2, 1) + JT * forward_flops(cfg, 1, J + JT / 2, 1)),
        "reference_forward": whole_rows(),
        **({"old_logprob_forward": whole_rows()} if old_logprob_forward else {}),
        "training_fwd_bwd": 3 * whole_rows(),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument("--new-tokens", type=int, default=48)
    ap.add_argument("--prompt-tokens", type=int, default=40, help="mean policy prompt length (chat template included)")
    ap.add_argument("--judge-prompt-tokens", type=int, default=330, help="mean judge prompt length")
    ap.add_argument("--judge-new-tokens", type=int, default=64)
    ap.add_argument("--judge-samples", type=int, default=1)
    ap.add_argument(
        "--old-logprob-forward",
        action="store_true",
        help="count a separate old-log-prob forward (neither grm nor TRL runs one when the trainer takes one step per batch)",
    )
    ap.add_argument(
        "--shared-prompts", action="store_true", help="count each prompt once per group in prefill, reference and training"
    )
    ap.add_argument("--measured", default="", help="comma list of NAME=SECONDS_PER_STEP to state as multiples of the floor")
    args = ap.parse_args()
    print(json.dumps(machine()), flush=True)

    import torch

    from grm.models import resolve_model

    cfg = json.load(open(os.path.join(resolve_model(args.model), "config.json")))
    cores = os.cpu_count() or 1
    rates = {}
    for name, dt in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        rates[name] = {"1_thread": round(gemm_gflops(dt, 1), 1), f"{cores}_threads": round(gemm_gflops(dt, cores), 1)}
    print(json.dumps({"gemm_gflops": rates, "shape": "1024x576 @ 576x1536"}))

    phases = step_flops(
        cfg,
        args.prompts * args.group,
        args.prompt_tokens,
        args.new_tokens,
        args.judge_prompt_tokens,
        args.judge_new_tokens,
        args.judge_samples,
        args.old_logprob_forward,
        group=args.group if args.shared_prompts else 1,
    )
    total = sum(phases.values())
    best = max(max(r.values()) for r in rates.values())
    print(
        json.dumps(
            {
                "step_tflop": round(total / 1e12, 3),
                "phases_tflop": {k: round(v / 1e12, 3) for k, v in phases.items()},
                "best_rate_gflops_all_cores": best,
                "floor_seconds_per_step": round(total / (best * 1e9), 2),
                "completions_per_step": args.prompts * args.group,
            }
        )
    )
    floor = total / (best * 1e9)
    for item in filter(None, args.measured.split(",")):
        name, _, secs = item.partition("=")
        print(json.dumps({"system": name, "step_seconds": float(secs), "x_floor": round(float(secs) / floor, 2)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
