"""Trainer backends: DeepSpeed ZeRO 0/2/3 on CPU vs plain torch, learning, checkpoints, 2 ranks."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from grm.training.deepspeed_backend import DeepSpeedTrainer
from grm.training.torch_backend import TorchTrainer
from tests.integration.training.tiny import fixed_batch, grpo_loss, mixed_steps, nll_loss, tiny_llama

pytestmark = pytest.mark.slow
os.environ.setdefault("DS_ACCELERATOR", "cpu")


def _ds(stage, dtype="fp32", **kw):
    kw.setdefault("lr", 1e-2)
    return DeepSpeedTrainer(tiny_llama(), micro_batch_size=2, global_batch_size=8, zero_stage=stage, dtype=dtype, **kw)


def _torch(**kw):
    kw.setdefault("lr", 1e-2)
    return TorchTrainer(tiny_llama(), micro_batch_size=2, **kw)


def _run(trainer, steps, batch, loss=nll_loss):
    return [trainer.step(batch, loss)["loss"] for _ in range(steps)]


def test_ten_steps_lower_the_loss_zero2():
    batch = fixed_batch()
    losses = _run(_ds(2), 10, batch)
    assert losses[-1] < losses[0] - 0.5, losses
    assert all(b < a for a, b in zip(losses, losses[1:], strict=False)), losses


@pytest.mark.parametrize("stage", [0, 2, 3])
def test_zero_stages_match_torch_backend(stage):
    batch = fixed_batch()
    plain, ds = _torch(), _ds(stage)
    ref = [plain.step(batch, nll_loss) for _ in range(4)]
    got = [ds.step(batch, nll_loss) for _ in range(4)]
    # the same whole-batch loss and gradient (DeepSpeed's 1/gas undone); other metrics averaged alike
    # (ZeRO-0 with a client optimizer does not track the gradient norm: NaN)
    for key in ("loss", "nll_mb_mean") if stage == 0 else ("loss", "grad_norm", "nll_mb_mean"):
        assert [m[key] for m in got] == pytest.approx([m[key] for m in ref], rel=1e-4, abs=2e-4), (stage, key, ref, got)


@pytest.mark.parametrize("stage", [2, 3])
def test_weight_buckets_are_the_full_trained_weights_in_bounded_buckets(stage):
    """What the weight broadcast sends: every parameter, full (ZeRO-3 gathers each bucket), in
    buckets of at most the bound unless one tensor alone is larger, equal to the gathered state."""
    ds = _ds(stage)
    ds.step(fixed_batch(), nll_loss)
    full = ds.state_dict()
    bound = 4 << 10
    buckets = [[(name, t.detach().clone()) for name, t in b] for b in ds.weight_buckets(bound)]
    sizes = [sum(t.numel() * t.element_size() for _, t in b) for b in buckets]
    assert len(buckets) > 2 and all(s <= bound or len(b) == 1 for s, b in zip(sizes, buckets, strict=True)), sizes
    sent = dict(pair for b in buckets for pair in b)
    assert set(sent) <= set(full) and set(full) - set(sent) <= {"lm_head.weight"}  # a tied head is sent once
    assert all(torch.equal(sent[k], full[k]) for k in sent)


def test_bf16_trains():
    batch = fixed_batch()
    losses = _run(_ds(2, dtype="bf16"), 6, batch)
    assert losses[-1] < losses[0] - 0.3, losses


def test_grpo_loss_moves_probability_towards_positive_advantages():
    batch = fixed_batch()
    t = _ds(2, lr=3e-3)
    before = t.logprobs(batch)
    b = batch.with_fields(old_logprobs=before)
    for _ in range(5):
        t.step(b, grpo_loss)
    after = t.logprobs(batch)
    seq_delta = ((after - before) * batch.loss_mask).sum(-1)
    adv = batch["advantages"]
    assert seq_delta[adv > 0].mean() > 0 > seq_delta[adv < 0].mean(), seq_delta


@pytest.mark.parametrize("backend", ["torch", "deepspeed-zero2", "deepspeed-zero3"])
def test_checkpoint_round_trip(backend, tmp_path):
    batch = fixed_batch()
    make = {
        "torch": lambda: _torch(warmup_steps=2, total_steps=5, schedule="cosine"),
        "deepspeed-zero2": lambda: _ds(2, warmup_steps=2, total_steps=5, schedule="cosine"),
        "deepspeed-zero3": lambda: _ds(3, warmup_steps=2, total_steps=5, schedule="cosine"),
    }[backend]
    straight = make()
    ref = _run(straight, 5, batch)
    first = make()
    part1 = _run(first, 3, batch)
    first.save(tmp_path / "ckpt")
    assert (tmp_path / "ckpt" / "COMPLETE").exists() and not (tmp_path / ".ckpt.tmp").exists()
    resumed = make()
    resumed.load(tmp_path / "ckpt")
    assert resumed.step_count == 3
    part2 = _run(resumed, 2, batch)
    assert part1 + part2 == pytest.approx(ref, abs=1e-5)
    w_ref, w_res = straight.state_dict(), resumed.state_dict()
    assert max(float((w_ref[k] - w_res[k]).abs().max()) for k in w_ref) < 1e-5


def test_half_written_checkpoint_is_refused(tmp_path):
    from grm.base import atomic_dir

    t = _torch()
    t.save(tmp_path / "good")
    with pytest.raises(RuntimeError):
        with atomic_dir(tmp_path / "good") as tmp:
            (tmp / "partial").write_text("x")
            raise RuntimeError("killed mid-write")
    # the previous checkpoint is intact and loads
    assert not (tmp_path / "good" / "partial").exists()
    _torch().load(tmp_path / "good")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="not a complete checkpoint"):
        _torch().load(tmp_path / "empty")


def test_torch_checkpoint_load_is_strict_but_for_the_tied_head(tmp_path):
    from safetensors.torch import load_file, save_file

    t = _torch()
    t.save(tmp_path / "ok")
    saved = load_file(str(tmp_path / "ok" / "model.safetensors"))
    assert "lm_head.weight" not in saved  # tied to the embedding, stored once
    _torch().load(tmp_path / "ok")  # ...and loads
    save_file({**saved, "extra.weight": saved["model.norm.weight"].clone()}, str(tmp_path / "ok" / "model.safetensors"))
    with pytest.raises(ValueError, match="unexpected \\['extra.weight'\\]"):
        _torch().load(tmp_path / "ok")
    save_file({k: v for k, v in saved.items() if k != "model.norm.weight"}, str(tmp_path / "ok" / "model.safetensors"))
    with pytest.raises(ValueError, match="missing \\['model.norm.weight'\\]"):
        _torch().load(tmp_path / "ok")


@pytest.mark.parametrize("stage", [2, 3])
def test_two_ranks_gloo_match_one_rank(stage, tmp_path):
    """Two ranks, each training on its token-balanced half of the same global batch (rows of
    different lengths), take the same steps as one rank on the whole batch, which takes the same
    steps as the plain torch trainer."""
    script = Path(__file__).with_name("two_ranks.py")
    root = Path(__file__).resolve().parents[3]
    port = 29500 + (os.getpid() + stage) % 1000
    procs = []
    for rank in range(2):
        env = {
            **os.environ,
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "WORLD_SIZE": "2",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "OMP_NUM_THREADS": "1",
            "DS_ACCELERATOR": "cpu",
            "PYTHONPATH": str(root),
        }
        procs.append(
            subprocess.Popen(
                [sys.executable, str(script), str(tmp_path / f"rank{rank}.pt"), str(stage)],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    outs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1][-2000:] for o in outs]
    r0, r1 = (torch.load(tmp_path / f"rank{r}.pt") for r in range(2))
    # the ranks trained on different, token-balanced halves...
    batch = fixed_batch()
    assert sorted(r0["shard"] + r1["shard"]) == sorted(batch.ids) and len(r0["shard"]) == len(r1["shard"]) == 4
    tokens = {i: int(n) for i, n in zip(batch.ids, batch.attention_mask.sum(-1), strict=True)}
    assert abs(sum(tokens[i] for i in r0["shard"]) - sum(tokens[i] for i in r1["shard"])) <= max(tokens.values())
    # ...and both report the global metrics, equal to one rank's on the whole batch
    one = _ds(stage)
    ref = mixed_steps(one)
    assert [m["loss"] for m in r0["metrics"]] == [m["loss"] for m in r1["metrics"]]
    for got, want in zip(r0["metrics"], ref, strict=True):
        assert got["loss"] == pytest.approx(want["loss"], rel=1e-3), (r0["metrics"], ref)
        assert got["grad_norm"] == pytest.approx(want["grad_norm"], rel=1e-3)
    w1 = one.state_dict()
    for k in w1:
        assert torch.equal(r0["weights"][k], r1["weights"][k]), k
    weight_gap = max(float((r0["weights"][k] - v).abs().max()) for k, v in w1.items())
    loss_gap = max(abs(g["loss"] - w["loss"]) / abs(w["loss"]) for g, w in zip(r0["metrics"], ref, strict=True))
    print(f"ZeRO-{stage}, 2 ranks vs 1: losses within {loss_gap:.1e} relative, weights {weight_gap:.1e} max abs")
    assert weight_gap < 1e-4
    # one DeepSpeed rank = the plain torch trainer (same micro-batches, same whole-batch loss)
    plain = _torch()
    plain_metrics = mixed_steps(plain)
    for key in ("loss", "grad_norm"):  # Adam hides a gradient scale in the weights, not in the norm
        assert [m[key] for m in plain_metrics] == pytest.approx([m[key] for m in ref], rel=1e-3), key
    wt = plain.state_dict()
    assert max(float((wt[k] - v).abs().max()) for k, v in w1.items()) < 1e-4
