"""Seconds per training step and per weight sync on SmolLM2-135M (DeepSpeed ZeRO-2, CPU).

Work: 32 sequences x 176 tokens (128 prompt + 48 response), GRPO loss, micro-batch 4 (8
accumulation steps), one torch thread. Prints one JSON line per dtype, then sync timings.

    OMP_NUM_THREADS=1 python benchmarks/train_step.py [--steps 3] [--dtypes fp32,bf16]
"""

from __future__ import annotations

import argparse
import json
import os
import time

from machine import machine  # beside this file

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("DS_ACCELERATOR", "cpu")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=3, help="measured steps (after one warm-up step)")
    ap.add_argument("--dtypes", default="fp32,bf16")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--micro-batch", type=int, default=4)
    args = ap.parse_args()
    print(json.dumps(machine()), flush=True)

    import statistics

    import torch

    from grm.algorithms import ppo_policy_loss
    from grm.engines.hf import HFEngine
    from grm.models.loading import load_model
    from grm.models.weights import save_weights
    from grm.training import TrainBatch
    from grm.training.deepspeed_backend import DeepSpeedTrainer
    from grm.training.sync import push_weights

    torch.set_num_threads(args.threads)
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(100, 40000, (128,), generator=g).tolist() for _ in range(32)]
    comps = [torch.randint(100, 40000, (48,), generator=g).tolist() for _ in range(32)]
    adv = torch.randn(32, generator=g)
    batch = TrainBatch.from_sequences(prompts, comps, pad_id=0, advantages=adv)

    def loss_fn(lp, mb, _):
        return ppo_policy_loss(lp, mb["old_logprobs"], mb["advantages"], mb.loss_mask)

    for dtype in args.dtypes.split(","):
        model, tok = load_model("smollm2-135m-instruct", dtype)
        trainer = DeepSpeedTrainer(
            model, lr=1e-6, micro_batch_size=args.micro_batch, global_batch_size=32, zero_stage=2, dtype=dtype
        )
        t0 = time.perf_counter()
        old = trainer.logprobs(batch)
        logprob_s = time.perf_counter() - t0
        b = batch.with_fields(old_logprobs=old)
        trainer.step(b, loss_fn)  # warm-up
        times = []
        for _ in range(args.steps):
            t0 = time.perf_counter()
            trainer.step(b, loss_fn)
            times.append(time.perf_counter() - t0)
        print(
            json.dumps(
                {
                    "what": "train_step",
                    "dtype": dtype,
                    "zero_stage": 2,
                    "sequences": 32,
                    "tokens_per_seq": 176,
                    "micro_batch": args.micro_batch,
                    "threads": args.threads,
                    "median_step_s": round(statistics.median(times), 2),
                    "steps_s": [round(t, 2) for t in times],
                    "logprobs_pass_s": round(logprob_s, 2),
                    "train_tokens_per_s": round(32 * 176 / statistics.median(times), 1),
                }
            ),
            flush=True,
        )
        engine = HFEngine(
            "smollm2-135m-instruct", dtype=dtype, model_obj=load_model("smollm2-135m-instruct", dtype)[0], tokenizer=tok
        )
        t0 = time.perf_counter()
        sd = trainer.state_dict()
        gather_s = time.perf_counter() - t0
        push_s = push_weights(engine, sd, version=1)
        import tempfile

        with tempfile.TemporaryDirectory() as d:
            disk_s = save_weights(sd, os.path.join(d, "w"), version=1)
        print(
            json.dumps(
                {
                    "what": "weight_sync",
                    "dtype": dtype,
                    "state_dict_s": round(gather_s, 2),
                    "in_process_push_s": round(push_s, 2),
                    "safetensors_write_s": round(disk_s, 2),
                }
            ),
            flush=True,
        )
        del trainer, engine, model


if __name__ == "__main__":
    main()
