"""Judges grm trains itself (``pipelines/judge-grpo.yaml``), through the real ``grm run``: SmolLM2
trained as a pairwise judge for 2 steps, with LoRA adapters (only the adapters checkpointed, the
engine generating with the merged weights, the reference the same module with its adapters off),
rewarded by the verdict rule; then its run directory
and its checkpoint are a judge's ``model:`` in ``grm eval`` and in a policy pipeline's ``judges:``."""

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import run_grm
from tests.integration.orchestrator.test_run import ENV, SMALL

pytestmark = pytest.mark.slow

JUDGE_RUN = [
    "train.steps=2",
    "algorithm.prompts_per_step=2",
    "algorithm.group_size=2",
    "rollout.max_new_tokens=24",
    "train.micro_batch_size=2",
    "train.lora={r: 4, alpha: 8}",
    "train.backend.type=torch",  # LoRA on DeepSpeed: test_lora.py
    "checkpoint.every=1",
    "checkpoint.keep=2",
    "checkpoint.export=true",
]


def _rows(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def test_a_judge_trained_by_grm_is_a_judge_in_eval_and_in_a_pipeline(tmp_path):
    run = tmp_path / "judge"
    r = run_grm("run", "builtin:judge-grpo", f"out_dir={run}", *JUDGE_RUN, timeout=900, env=ENV)
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-5000:])
    ms = _rows(run / "metrics.jsonl")
    assert [m["step"] for m in ms] == [1, 2]
    samples = _rows(run / "samples.jsonl")
    assert len(samples) == 8
    # each step holds both orders of one pair; a reward is the verdict rule's (masked when no verdict)
    for step in (1, 2):
        pairs = {s["prompt_id"].rsplit(":", 1)[0] for s in samples if s["step"] == step}
        orders = sorted(s["prompt_id"].rsplit(":", 1)[1] for s in samples if s["step"] == step)
        assert len(pairs) == 1 and orders == ["ab", "ab", "ba", "ba"], (pairs, orders)
    for s in samples:
        v = s["judges"]["verdict-correct"]
        assert v["masked"] == (v["reward"] is None) and (v["reward"] is None or 0.0 <= v["reward"] <= 1.0), v
        if v["reward"] is not None:  # a verdict was read: which, whether right, how the other order agreed
            assert v["details"]["verdict"] in ("A", "B", "tie") and v["details"]["correct"] in (0.0, 1.0), v
    ckpt = run / "checkpoints" / "step-1"  # not the latest: the run's own export is step 2's
    assert json.loads((ckpt / "policy" / "lora.json").read_text())["r"] == 4  # adapters only, and how to merge them
    assert (run / "model" / "config.json").is_file()  # the merged export of the completed run

    # grm eval: the run directory as the judge's model (its RUN/model/ export)
    ev = tmp_path / "eval"
    r = run_grm(
        "eval", "builtin:pairwise-preference", f"model={run}", "sampling.max_new_tokens=16",
        "--data", "builtin:constraints-lexical-pairs", "--limit", "2", "--out", str(ev), env=ENV,
    )  # fmt: skip
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-3000:])
    summary = json.loads((ev / "metrics.json").read_text())["judges"]["pairwise-preference"]
    assert summary["pairs"]["n"] == 2, summary
    results = (ev / "results.jsonl").read_text()
    assert len(results.splitlines()) == 2 and results.count(f'"model": "{run}"') == 2  # provenance: the trained judge

    # a policy pipeline's judge: the checkpoint (merged once into the model store) scores the rollouts
    pol = tmp_path / "policy"
    r = run_grm(
        "run", "builtin:quickstart", f"out_dir={pol}", "train.steps=1", *SMALL[:-1], "train.backend.type=torch",
        "checkpoint.every=0", f"judges.0.overrides=[model={ckpt}, sampling.max_new_tokens=12]", timeout=900, env=ENV,
    )  # fmt: skip
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-5000:])
    m = _rows(pol / "metrics.jsonl")[0]
    assert m["judge_errors/helpfulness-pointwise-logprob"] == 0 and "reward/helpfulness-pointwise-logprob" in m, m
    from safetensors.torch import load_file

    from grm.models import resolve_model
    from grm.models.store import grm_home

    assert resolve_model(str(run)) == str((run / "model").resolve())  # what grm eval loaded: the run's own export
    merged = Path(resolve_model(str(ckpt)))  # made by the judge actor above, found again by its key
    assert merged.parent == grm_home() / "trained" and (merged / "COMPLETE").exists()
    last = Path(resolve_model(str(run / "checkpoints" / "step-2")))  # the latest checkpoint: the run's export
    assert last == (run / "model").resolve()
    own, made = load_file(str(last / "model.safetensors")), load_file(str(merged / "model.safetensors"))
    assert own.keys() == made.keys()  # the same model, step 1's weights merged
    shutil.rmtree(merged)  # a merged SmolLM2 is ~540 MB: the suite leaves none behind
    shutil.rmtree(run / "checkpoints")
