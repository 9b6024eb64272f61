"""Trainer backends: DeepSpeed ZeRO 0/2/3 on CPU vs plain torch, learning, checkpoints, 2 ranks."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from grm.training.deepspeed_backend import DeepSpeedTrainer
from grm.training.torch_backend import TorchTrainer
from tests.integration.training.tiny import fixed_batch, grpo_loss, nll_loss, tiny_llama

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
    ref = _run(_torch(), 4, batch)
    got = _run(_ds(stage), 4, batch)
    assert got == pytest.approx(ref, abs=2e-4), (stage, ref, got)


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


def test_two_ranks_gloo_match_one_rank(tmp_path):
    script = Path(__file__).with_name("two_ranks.py")
    root = Path(__file__).resolve().parents[3]
    port = 29500 + os.getpid() % 1000
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
                [sys.executable, str(script), str(tmp_path / f"rank{rank}.pt")],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1][-2000:] for o in outs]
    r0, r1 = (torch.load(tmp_path / f"rank{r}.pt") for r in range(2))
    one = _ds(2)
    ref = _run(one, 3, fixed_batch())
    # ranks see different halves but average gradients: same weights everywhere, same as 1 rank
    for k, v in one.state_dict().items():
        assert torch.allclose(r0["weights"][k], r1["weights"][k], atol=1e-6)
        assert torch.allclose(r0["weights"][k], v, atol=1e-4), k
    assert r0["losses"][0] != pytest.approx(r1["losses"][0])  # they did see different data
    assert (r0["losses"][0] + r1["losses"][0]) / 2 == pytest.approx(ref[0], abs=1e-4)
