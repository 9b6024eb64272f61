"""`grm export` end to end: a real DeepSpeed ZeRO-2 checkpoint of SmolLM2 (one optimizer step, as
the quickstart trains it, made here without Ray or `grm run`) exported by the command line, loaded
offline with transformers' Auto classes, and scored like the checkpoint grm itself loads."""

import json
import os

import pytest
import torch
import yaml

from tests.conftest import run_grm

pytestmark = pytest.mark.slow
os.environ.setdefault("DS_ACCELERATOR", "cpu")

TEXT = "What is 17 + 25? Answer: 42."
MESSAGES = [{"role": "user", "content": "What is 17 + 25?"}, {"role": "assistant", "content": "42"}]


def _run_with_one_checkpoint(run, tok):
    """RUN/config.resolved.yaml as builtin:quickstart records it, one metrics line, and
    checkpoints/step-1 written the way the policy actor writes it (trainer.save into policy/)."""
    from grm.base import atomic_dir
    from grm.config.resolve import load_pipeline
    from grm.models.loading import load_model
    from grm.training import TrainBatch
    from grm.training.deepspeed_backend import DeepSpeedTrainer
    from tests.integration.training.tiny import nll_loss

    spec = load_pipeline("builtin:quickstart").spec
    run.mkdir()
    (run / "config.resolved.yaml").write_text(yaml.safe_dump(json.loads(spec.model_dump_json()), sort_keys=False))
    (run / "metrics.jsonl").write_text(json.dumps({"step": 1, "reward_mean": 0.25, "kl": 0.0, "format": 1}) + "\n")
    model, _ = load_model("smollm2-135m-instruct", "fp32")
    trainer = DeepSpeedTrainer(model, lr=1e-3, micro_batch_size=2, global_batch_size=2, zero_stage=2, dtype="fp32")
    prompts = [tok("What is 2 + 2?").input_ids, tok("What is 3 + 5?").input_ids]
    answers = [tok(" 4").input_ids, tok(" 8").input_ids]
    trainer.step(TrainBatch.from_sequences(prompts, answers, pad_id=tok.pad_token_id, ids=["a", "b"]), nll_loss)
    with atomic_dir(run / "checkpoints" / "step-1") as tmp:
        trainer.save(tmp / "policy")


def test_an_exported_run_loads_offline_and_scores_as_its_checkpoint(tmp_path, monkeypatch):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from grm.evaluation.policy_source import resolve_policy
    from grm.models.checkpoints import apply_state, checkpoint_state
    from grm.models.loading import load_model
    from grm.models.weights import token_logprobs

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    base, tok = load_model("smollm2-135m-instruct", "fp32")
    run, out = tmp_path / "run", tmp_path / "hf"
    _run_with_one_checkpoint(run, tok)

    r = run_grm("export", str(run), "--out", str(out), env={"HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr[-3000:]
    assert f"wrote {out}" in r.stdout
    for f in ("config.json", "model.safetensors", "generation_config.json", "tokenizer.json", "tokenizer_config.json"):
        assert (out / f).is_file(), f
    card = (out / "README.md").read_text()
    assert "- step: 1 of 5" in card and "- algorithm: grpo" in card and "| reward_mean | 0.25 |" in card

    exported = AutoModelForCausalLM.from_pretrained(out).eval()
    etok = AutoTokenizer.from_pretrained(out)
    assert exported.dtype == torch.float32  # ZeRO's fp32 master weights, kept as they are

    # grm's own view of the checkpoint: the run's base model with the checkpoint's weights
    src = resolve_policy(str(run))
    mine, _ = load_model(src.model, "fp32")
    apply_state(mine, checkpoint_state(src.checkpoint), src.checkpoint)

    enc = tok(TEXT, return_tensors="pt")
    with torch.no_grad():
        lp = {
            name: token_logprobs(m, enc.input_ids, enc.attention_mask)[0]
            for name, m in (("exported", exported), ("checkpoint", mine), ("base", base))
        }
    diff = float((lp["exported"] - lp["checkpoint"]).abs().max())
    print(f"max |log-prob exported - checkpoint| = {diff:.3g}")
    assert diff <= 1e-5
    assert float((lp["exported"] - lp["base"]).abs().max()) > 1e-3  # the trained weights, not the base model's

    # the tokenizer round-trips: same ids, same text back, same chat template
    assert etok(TEXT).input_ids == tok(TEXT).input_ids
    assert etok.decode(etok(TEXT).input_ids, skip_special_tokens=True) == TEXT
    assert etok.apply_chat_template(MESSAGES, tokenize=False) == tok.apply_chat_template(MESSAGES, tokenize=False)
    assert (etok.eos_token_id, etok.pad_token_id) == (tok.eos_token_id, tok.pad_token_id)
