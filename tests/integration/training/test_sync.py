"""Weight sync: trainer -> hf engine in another Ray actor, and -> disk; log-probs agree after sync."""

import os

import pytest
import torch

from grm.models.weights import save_weights
from grm.training import TrainBatch
from grm.training.sync import push_weights
from grm.training.torch_backend import TorchTrainer
from tests.integration.training.tiny import nll_loss

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def ray_local():
    ray = pytest.importorskip("ray")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    ray.init(num_cpus=2, object_store_memory=1_500_000_000, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def test_sync_to_engine_actor_matches_trainer(ray_local, tmp_path):
    from grm.engines.hf import HFEngine
    from grm.models.loading import load_model

    ray = ray_local

    @ray.remote
    class EngineActor:
        """A real hf engine in another process, fed weights the way the policy's engine is."""

        def __init__(self, model: str, dtype: str) -> None:
            self.engine = HFEngine(model, dtype=dtype)

        def sequence_logprobs(self, prompts, completions):
            return self.engine.sequence_logprobs(prompts, completions)

        def update_weights(self, state_dict, version):
            self.engine.update_weights(state_dict, version)

        def version(self):
            return self.engine.version

    model, tok = load_model("smollm2-135m-instruct", "fp32")
    trainer = TorchTrainer(model, lr=1e-4, micro_batch_size=2)
    prompt = tok("The capital of France is", add_special_tokens=False)["input_ids"]
    completion = tok(" Paris, a city on the Seine.", add_special_tokens=False)["input_ids"]
    batch = TrainBatch.from_sequences([prompt, prompt], [completion, completion[:3]], pad_id=tok.pad_token_id or 0)
    for _ in range(2):
        trainer.step(batch, nll_loss)
    ours = trainer.logprobs(batch)[0][batch.loss_mask[0] > 0]

    actor = EngineActor.options(num_cpus=1).remote("smollm2-135m-instruct", dtype="fp32")
    before = torch.tensor(ray.get(actor.sequence_logprobs.remote([prompt], [completion]))[0])
    assert (before - ours).abs().max() > 1e-3  # training moved the weights
    seconds = push_weights(actor, trainer.state_dict(), version=2)
    assert ray.get(actor.version.remote()) == 2
    after = torch.tensor(ray.get(actor.sequence_logprobs.remote([prompt], [completion]))[0])
    assert torch.allclose(after, ours, atol=1e-4), (after - ours).abs().max()
    print(f"sync to actor: {seconds:.2f} s")

    path = tmp_path / "weights"
    save_weights(trainer.state_dict(), path, version=2)
    from safetensors.torch import load_file

    on_disk = load_file(str(path / "model.safetensors"))
    assert (path / "VERSION").read_text().strip() == "2"
    assert torch.equal(on_disk["model.norm.weight"], trainer.state_dict()["model.norm.weight"])
    ray.kill(actor)


def test_critic_trains_towards_returns():
    from grm.algorithms import value_loss
    from grm.training.models import ValueModel, value_forward
    from tests.integration.training.tiny import fixed_batch, tiny_llama

    base = tiny_llama()
    critic = ValueModel(base.model, base.config.hidden_size)
    batch = fixed_batch()
    returns = batch.loss_mask * 0.7
    trainer = TorchTrainer(critic, lr=1e-2, micro_batch_size=4, forward=value_forward)
    old = trainer.logprobs(batch)  # values of the current critic
    b = batch.with_fields(returns=returns, old_values=old)

    def loss_fn(values, mb, _):
        return value_loss(values, mb["old_values"], mb["returns"], mb.loss_mask, clip=None, tokens=mb.totals.tokens)

    losses = [trainer.step(b, loss_fn)["loss"] for _ in range(15)]
    assert losses[-1] < losses[0] * 0.2, losses


def test_reference_model_is_frozen_and_matches_policy_at_start():
    from grm.training.models import ReferenceModel
    from tests.integration.training.tiny import fixed_batch, tiny_llama

    ref = ReferenceModel(tiny_llama())
    pol = TorchTrainer(tiny_llama(), lr=1e-3, micro_batch_size=4)
    batch = fixed_batch()
    assert torch.allclose(ref.logprobs(batch), pol.logprobs(batch), atol=1e-6)
    assert not any(p.requires_grad for p in ref.module.parameters())
