"""LoRA adapters (``train.lora``): merged weights equal the adapted model, the first step's loss
equals full fine-tuning's, only adapters are checkpointed, and a checkpoint resumes exactly (torch
and DeepSpeed ZeRO-2), also through ``grm.models.checkpoints`` (merged into the base)."""

import json
import os

import pytest
import torch

from grm.config.pipeline import LoraSpec
from grm.models import lora
from grm.models.checkpoints import LORA_FILE, apply_state, checkpoint_state, raw_checkpoint_state
from grm.training.deepspeed_backend import DeepSpeedTrainer
from grm.training.torch_backend import TorchTrainer
from tests.integration.training.tiny import fixed_batch, mixed_steps, nll_loss, tiny_llama

pytestmark = pytest.mark.slow
os.environ.setdefault("DS_ACCELERATOR", "cpu")
SPEC = LoraSpec(r=4, alpha=8, target_modules=["q_proj", "v_proj", "down_proj"])


def _wrapped(seed=0):
    return lora.wrap(tiny_llama(seed), SPEC)


def _trainer(kind, module):
    if kind == "torch":
        return TorchTrainer(module, lr=1e-2, micro_batch_size=2)
    return DeepSpeedTrainer(module, lr=1e-2, micro_batch_size=2, global_batch_size=8, zero_stage=2, dtype="fp32")


def test_only_adapters_train_and_merged_weights_are_the_adapted_model():
    base = tiny_llama()
    plain = {k: v.clone() for k, v in base.state_dict().items()}
    m = lora.wrap(base, SPEC)
    trainable = [k for k, p in m.named_parameters() if p.requires_grad]
    assert trainable and all(".lora_" in k for k in trainable)
    fresh = lora.merged_state_dict(m)  # B = 0: the base model itself, under its own names
    assert set(fresh) == set(plain) and all(torch.equal(fresh[k], plain[k]) for k in plain)
    with torch.no_grad():
        for k, p in m.named_parameters():
            if ".lora_B." in k:
                p.normal_(std=0.1)
    merged = lora.merged_state_dict(m)
    changed = {k for k in plain if not torch.equal(merged[k], plain[k])}
    assert changed and all(k.endswith(("q_proj.weight", "v_proj.weight", "down_proj.weight")) for k in changed)
    other = tiny_llama(seed=5)
    apply_state(other, merged, "test")
    ids = torch.randint(3, 96, (2, 10))
    with torch.no_grad():
        assert torch.allclose(other(ids).logits, m(ids).logits, atol=1e-5)


@pytest.mark.parametrize("kind", ["torch", "deepspeed"])
def test_first_step_loss_equals_full_fine_tuning(kind):
    batch = fixed_batch()
    full = _trainer(kind, tiny_llama()).step(batch, nll_loss)
    adapted = _trainer(kind, _wrapped()).step(batch, nll_loss)
    assert adapted["loss"] == pytest.approx(full["loss"], rel=1e-6), (full, adapted)


@pytest.mark.parametrize("kind", ["torch", "deepspeed"])
def test_a_lora_checkpoint_holds_adapters_only_and_resumes_exactly(kind, tmp_path):
    t = _trainer(kind, _wrapped())
    mixed_steps(t, 2)
    ckpt = tmp_path / "checkpoints" / "step-2"
    t.save(ckpt / "policy")
    (ckpt / "COMPLETE").touch()
    cfg = json.loads((ckpt / "policy" / LORA_FILE).read_text())
    assert cfg["r"] == 4 and cfg["scaling"] == 2.0 and cfg["target_modules"] == ["down_proj", "q_proj", "v_proj"]
    saved = raw_checkpoint_state(ckpt)  # the adapters, not the base weights
    assert saved and set(saved) == set(lora.adapter_state(t.module if kind == "torch" else t.engine.module))
    # the checkpoint merged into a fresh base equals the trainer's own merged weights
    merged = checkpoint_state(ckpt, tiny_llama())
    mine = t.state_dict()
    assert all(torch.allclose(merged[k], mine[k], atol=1e-6) for k in mine)
    ahead = mixed_steps(t, 2)
    back = _trainer(kind, _wrapped())
    back.load(ckpt / "policy")
    assert back.step_count == 2
    again = mixed_steps(back, 2)
    assert [m["loss"] for m in again] == pytest.approx([m["loss"] for m in ahead], rel=1e-6, abs=1e-7)
    end, end2 = t.state_dict(), back.state_dict()
    assert all(torch.allclose(end[k], end2[k], atol=1e-6) for k in end)


def test_adapters_of_another_rank_are_refused(tmp_path):
    t = _trainer("torch", _wrapped())
    t.step(fixed_batch(), nll_loss)
    t.save(tmp_path / "policy")
    other = TorchTrainer(
        lora.wrap(tiny_llama(), LoraSpec(r=2, alpha=8, target_modules=["q_proj", "v_proj", "down_proj"])),
        lr=1e-2,
        micro_batch_size=2,
    )
    with pytest.raises(ValueError, match="do not match train.lora"):
        other.load(tmp_path / "policy")


@pytest.mark.parametrize("kind", ["torch", "deepspeed"])
def test_the_colocated_reference_is_the_trainers_module_with_adapters_off(kind):
    from grm.training.models import AdapterOffReference, ReferenceModel

    t = _trainer(kind, _wrapped())
    mixed_steps(t, 3)
    ref = AdapterOffReference(t.module, micro_batch_size=2)
    batch = fixed_batch()
    base = ReferenceModel(tiny_llama(), micro_batch_size=2).logprobs(batch)
    assert torch.allclose(ref.logprobs(batch), base, atol=1e-5)  # the base model, not a copy of it
    assert t.module.training  # its mode is given back
    assert not torch.allclose(t.logprobs(batch), base, atol=1e-4)  # the trainer's adapters are on again


def test_adapter_export_loads_with_peft_and_the_merged_export_equals_it(tmp_path):
    """``grm export --adapter`` writes what ``peft`` loads; ``grm export`` the merged model: both
    compute what the trained adapters compute."""
    from peft import PeftModel
    from tokenizers import Tokenizer, models
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    from grm.models.trained import write_adapter_dir, write_hf_dir

    base_dir = tmp_path / "base"
    tiny_llama().save_pretrained(str(base_dir))  # a base model directory, as the store holds one
    PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel({"<unk>": 0}, unk_token="<unk>"))).save_pretrained(
        str(base_dir)
    )
    t = _trainer("torch", lora.wrap(AutoModelForCausalLM.from_pretrained(str(base_dir)), SPEC))
    mixed_steps(t, 2)
    ckpt = tmp_path / "checkpoints" / "step-2"
    t.save(ckpt / "policy")
    write_adapter_dir(str(base_dir), ckpt, tmp_path / "adapter")
    write_hf_dir(str(base_dir), ckpt, tmp_path / "merged")
    assert (tmp_path / "adapter" / "adapter_config.json").is_file()
    peft_model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(str(base_dir)), str(tmp_path / "adapter"))
    merged = AutoModelForCausalLM.from_pretrained(str(tmp_path / "merged"))
    ids = torch.randint(3, 96, (2, 10))
    with torch.no_grad():
        want = t.module(ids).logits
        assert torch.allclose(peft_model(ids).logits, want, atol=1e-5)
        assert torch.allclose(merged(ids).logits, want, atol=1e-5)
