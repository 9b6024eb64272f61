"""What a policy actor trains and scores with besides its rollout engine: the policy's trainer
(LoRA-wrapped when ``train.lora`` asks), the frozen reference when it is colocated (under LoRA the
trainer's own base weights with the adapters off, else its own copy), and PPO's critic, each on
the pipeline's trainer backend (torch or DeepSpeed) sized for one mini-batch."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from grm.orchestrator.role_actor import REFERENCE_DTYPE

if TYPE_CHECKING:
    from grm.algorithms import Algorithm
    from grm.config.pipeline import PipelineSpec
    from grm.config.policy import PolicySpec
    from grm.training import TrainerBackend
    from grm.training.models import AdapterOffReference, ReferenceModel


@dataclass
class PolicyModels:
    trainer: TrainerBackend
    """The policy's trainer (its module is the policy, LoRA-wrapped under ``train.lora``)."""
    reference: ReferenceModel | AdapterOffReference | None
    """The frozen reference when it runs in this actor; None when it is remote or there is none."""
    critic: TrainerBackend | None
    """PPO's value model's trainer; None for the critic-free algorithms."""
    critic_module: Any
    """The critic's value model (None without one): the core ledger watches it."""


def build_models(
    cfg: PipelineSpec, policy: PolicySpec, algorithm: Algorithm, module: Any, device: Any, with_reference: bool
) -> PolicyModels:
    """The trainer over ``module`` (the policy's loaded fp32 model), the reference when
    ``with_reference`` and the critic when the algorithm needs one."""
    from grm.training.models import AdapterOffReference, ReferenceModel, ValueModel, value_forward

    t = cfg.train
    # one optimizer step per mini-batch: the trainers are built for the mini-batch size
    batch = cfg.algorithm.prompts_per_step * cfg.algorithm.group_size // algorithm.mini_batches
    common = dict(
        lr=t.lr,
        micro_batch_size=t.micro_batch_size,
        max_grad_norm=t.max_grad_norm,
        warmup_steps=t.warmup_steps * algorithm.steps_per_batch,
        total_steps=t.steps * algorithm.steps_per_batch,
        schedule=t.lr_schedule,
    )
    if t.lora is not None:
        from grm.models.lora import wrap

        module = wrap(module, t.lora)
    trainer = make_trainer(cfg, module, batch, common, device, entropy=True)
    reference: ReferenceModel | AdapterOffReference | None = None
    if with_reference and t.lora is not None:  # the base model is the trainer's own, adapters off
        reference = AdapterOffReference(trainer.module, micro_batch_size=t.micro_batch_size)
    elif with_reference:
        reference = ReferenceModel(policy.model, dtype=REFERENCE_DTYPE, micro_batch_size=t.micro_batch_size, device=device)
    critic = value_model = None
    if algorithm.needs_critic:
        value_model = ValueModel.from_pretrained(policy.model, "fp32")
        critic = make_trainer(cfg, value_model, batch, {**common, "lr": cfg.algorithm.critic_lr}, device, forward=value_forward)
    return PolicyModels(trainer, reference, critic, value_model)


def make_trainer(cfg: PipelineSpec, module: Any, batch: int, common: dict[str, Any], device: Any, **kw: Any) -> TrainerBackend:
    """``module``'s trainer on the pipeline's backend, for mini-batches of ``batch`` rows."""
    b = cfg.train.backend
    if b.type == "deepspeed":
        from grm.training.deepspeed_backend import DeepSpeedTrainer

        return DeepSpeedTrainer(
            module,
            global_batch_size=batch,
            zero_stage=b.zero_stage,
            dtype=b.dtype,
            extra_config=b.deepspeed_config,
            collective_timeout_s=b.collective_timeout_s,
            **common,
            **kw,
        )
    from grm.training.torch_backend import TorchTrainer

    return TorchTrainer(module, device=device, **common, **kw)
